"""Waits while the master of a TensorFlow parameter-server job still serves, as SageMaker's
TensorFlow container does on every other instance once its script is done: that
instance's ``ps`` task holds variables the master may still read and update, so it ends
only when the master's task port no longer takes connections.

    python -m runtime.launch.tensorflow_master HOST:PORT
"""

from __future__ import annotations

import socket
import sys
import time

POLL_SECONDS = 1.0
CONNECT_TIMEOUT = 2.0


def serving(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT):
            return True
    except OSError:
        return False


def wait_until_done(address: str, poll: float = POLL_SECONDS) -> None:
    host, _, port = address.rpartition(":")
    if serving(host, int(port)):
        print(f"Waiting for the master at {address} to finish", flush=True)
        while serving(host, int(port)):
            time.sleep(poll)
    print(f"The master at {address} is done: this instance's ps task ends", flush=True)


def main() -> None:
    if len(sys.argv) != 2 or ":" not in sys.argv[1]:
        sys.exit("usage: python -m runtime.launch.tensorflow_master HOST:PORT")
    wait_until_done(sys.argv[1])


if __name__ == "__main__":
    main()
