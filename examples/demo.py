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
from pathlib import Path

from runyard.client import DEFAULT_URL, discover, is_up, runyard_home, wait_until_up

REPO = Path(__file__).resolve().parents[1]
RUNYARD = [sys.executable, "-m", "runyard"]


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
    started = wait_until_up(
        DEFAULT_URL,
        alive=lambda: server.poll() is None,
        interval=0.3,
        waiting=lambda: print(".", end="", flush=True),
    )
    if not started:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        sys.exit(f"the server did not start (is port 8642 taken?):\n{tail}")
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
    if is_up(url):
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
