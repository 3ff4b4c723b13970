"""A throwaway `runyard server` on its defaults, in a temporary RUNYARD_HOME."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from runyard.client import Client

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_server() -> Iterator[Client]:
    with server_and_home() as (client, _home):
        yield client


@contextmanager
def server_and_home(settings: dict[str, str] | None = None) -> Iterator[tuple[Client, Path]]:
    """The server's client and its RUNYARD_HOME, with ``settings`` (RUNYARD_* variables)."""
    with tempfile.TemporaryDirectory(prefix="runyard-bench-") as home:
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
        env.update(settings or {})
        env["RUNYARD_HOME"] = home
        with open(Path(home) / "server.log", "ab") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "runyard", "server", "--port", str(port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("server did not start")
                time.sleep(0.1)
            time.sleep(1.0)  # let the worker connect to the broker before timing anything
            with Client(url, (Path(home) / "token").read_text().strip()) as client:
                yield client, Path(home)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
