"""`make demo`: start Runyard on its embedded defaults, train a 2-instance DDP job, stop.

Every step is a `runyard` command, printed before it runs, so the demo doubles as a tour.
If a Runyard server is already running for this RUNYARD_HOME, the demo uses it and leaves
it running.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from runyard.client import DEFAULT_URL, discover, runyard_home

REPO = Path(__file__).resolve().parents[1]
RUNYARD = [sys.executable, "-m", "runyard"]


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def run(*args: str) -> int:
    print(f"\n$ runyard {shlex.join(args)}", flush=True)
    return subprocess.call([*RUNYARD, *args], cwd=REPO)


def start_server(home: Path) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    log = home / "demo-server.log"
    print(f"$ runyard server   (RUNYARD_HOME={home}, log: {log})", flush=True)
    with open(log, "ab") as handle:
        server = subprocess.Popen(
            [*RUNYARD, "server"], stdout=handle, stderr=subprocess.STDOUT, cwd=REPO
        )
    deadline = time.monotonic() + 60
    while not healthy(DEFAULT_URL):
        if server.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            sys.exit(f"the server did not start (is port 8642 taken?):\n{tail}")
        print(".", end="", flush=True)
        time.sleep(0.3)
    print(f" up at {DEFAULT_URL}", flush=True)
    return server


def stop_server(server: subprocess.Popen[bytes]) -> None:
    print("\nStopping the server", flush=True)
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()


def main() -> int:
    home = runyard_home()
    url, _token = discover()
    server = None
    if healthy(url):
        print(f"Using the Runyard server already running at {url}")
    else:
        server = start_server(home)
    try:
        code = run(
            "submit",
            "--base-job-name",
            "pytorch-ddp",
            "--source-dir",
            "examples/pytorch-ddp",
            "--entry-point",
            "train.py",
            "--instance-type",
            "local",
            "--instance-count",
            "2",
            "--distribution",
            '{"torch_distributed": {"enabled": true}}',
            "--hyperparameter",
            "epochs=8",
            "--wait",
            "--logs",
        )
        run("list", "--limit", "3")
        return code
    finally:
        if server is not None:
            stop_server(server)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
