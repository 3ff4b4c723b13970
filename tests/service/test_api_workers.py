"""RUNYARD_API_WORKERS: several API processes behind one port, each answering, all ending
with the server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from runyard.client import Client, wait_until_up
from tests.runyard.test_server_startup import REPO, _free_port


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(child) for child in (task / "children").read_text().split()}
    return found


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        try:
            children = _children(todo.pop())
        except FileNotFoundError:  # it ended meanwhile
            continue
        found |= children
        todo.extend(children)
    return found


def _serving(pid: int) -> bool:
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    return b"multiprocessing.spawn" in cmdline and b"resource_tracker" not in cmdline


def test_two_api_processes_answer_on_one_port_and_end_with_the_server(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env |= {"RUNYARD_HOME": str(home), "RUNYARD_API_WORKERS": "2"}
    with open(tmp_path / "stderr.log", "wb") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "runyard", "server", "--port", str(port)],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_up(url, alive=lambda: server.poll() is None), (
            tmp_path / "stderr.log"
        ).read_text()
        api = {pid for pid in _descendants(server.pid) if _serving(pid)}
        assert len(api) == 2

        token = (home / "token").read_text().strip()
        with Client(url, token) as client:
            # Each request may land on either process: what one writes, both read.
            names = {f"ci-{n}" for n in range(6)}
            for name in names:
                client.create_token(name)
            for _ in range(4):
                assert names <= {token["name"] for token in client.list_tokens()}
        everyone = _descendants(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in everyone):
        time.sleep(0.2)
    left = [pid for pid in everyone if Path(f"/proc/{pid}").exists()]
    assert left == [], "processes outlived the server"
