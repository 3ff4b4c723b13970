"""Whether an instance still reaches its peers over the job's network.

Each instance answers on ``PORT`` (accepting each connection and closing it) and calls
every peer once a second; one that reached its peers, and then none of them for
``timeout`` seconds, has lost the job's network. Its scripts alone would only notice when
their collectives time out (gloo's default is half an hour), and meanwhile hold the job
until max_run.

Start the watch where the job's processes run (in the instance's network namespace): its
sockets and threads stay there.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

# Runyard's on every instance with a network of its own, beside the launch agent's 7077.
PORT = 7078
INTERVAL = 1.0
CONNECT_TIMEOUT = 1.0


class PeerWatch:
    def __init__(
        self, peers: dict[str, str], timeout: float, on_lost: Callable[[str], None]
    ) -> None:
        self.peers = peers  # host -> address, this instance left out
        self.timeout = timeout
        self.on_lost = on_lost
        self._done = threading.Event()
        self._server = socket.create_server(("", PORT), reuse_port=False)
        self._threads = [
            threading.Thread(target=self._answer, name="peer-watch-answer", daemon=True),
            threading.Thread(target=self._call, name="peer-watch-call", daemon=True),
        ]

    def start(self) -> PeerWatch:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _answer(self) -> None:
        while not self._done.is_set():
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed by stop()
            connection.close()

    def _call(self) -> None:
        # Counted from the last call a peer answered: until one first does, the peers may
        # still be fetching their code and data.
        last_reached: float | None = None
        while not self._done.wait(INTERVAL):
            if any(self._reaches(address) for address in self.peers.values()):
                last_reached = time.monotonic()
                continue
            if last_reached is None:
                continue
            silent = time.monotonic() - last_reached
            if silent >= self.timeout:
                names = ", ".join(sorted(self.peers))
                self.on_lost(f"reached none of its peers ({names}) for {silent:.0f} s")
                return

    def _reaches(self, address: str) -> bool:
        try:
            with socket.create_connection((address, PORT), timeout=CONNECT_TIMEOUT):
                return True
        except OSError:
            return False
