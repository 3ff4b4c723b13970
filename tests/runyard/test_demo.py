"""`make demo`'s script as a real process: it starts its server on RUNYARD_PORT, and
leaves no server behind when it fails or is stopped."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _demo(home: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env.update(RUNYARD_HOME=str(home), RUNYARD_PORT=str(port), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "examples/demo.py"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_taken_port_fails_the_demo_and_names_the_port(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        demo = _demo(tmp_path / "home", port)
        out, err = demo.communicate(timeout=120)
    assert demo.returncode == 1, (out, err)
    assert f"the server did not start at http://127.0.0.1:{port}" in err
    assert f"port {port} on 127.0.0.1 is taken" in err
    assert "$ runyard submit" not in out


def test_a_stopped_demo_stops_the_server_it_started(tmp_path: Path) -> None:
    home, port = tmp_path / "home", _free_port()
    demo = _demo(home, port)
    assert demo.stdout is not None
    seen = []
    deadline = time.monotonic() + 120
    for line in demo.stdout:
        seen.append(line)
        if "$ runyard submit" in line or time.monotonic() > deadline:
            break
    assert any(f"up at http://127.0.0.1:{port}" in line for line in seen), seen
    server_pid = json.loads((home / "server.json").read_text())["pid"]

    demo.send_signal(signal.SIGTERM)
    demo.communicate(timeout=120)
    assert demo.returncode == 143
    assert _gone(server_pid)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens there now
