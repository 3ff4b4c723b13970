"""`make demo`: start Runyard on its embedded defaults, train a 2-instance DDP job, stop.

Every step is a `runyard` command, printed before it runs, so the demo doubles as a tour.
If a Runyard server is already running for this RUNYARD_HOME, the demo uses it and leaves
it running. The server it starts listens on RUNYARD_PORT (default 8642), and is stopped
however the demo ends: a failed step, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from runyard import variables
from runyard.client import DEFAULT_PORT, discover, is_up, runyard_home, wait_until_up

REPO = Path(__file__).resolve().parents[1]
RUNYARD = [sys.executable, "-m", "runyard"]


def run(*args: str) -> int:
    print(f"\n$ runyard {shlex.join(args)}", flush=True)
    return subprocess.call([*RUNYARD, *args], cwd=REPO)


def port() -> int:
    given = os.environ.get(variables.PORT, str(DEFAULT_PORT))
    if not given.isdigit():
        sys.exit(f"{variables.PORT}={given!r}: not a port number")
    return int(given)


class ServerDidNotStart(Exception):
    pass


def start_server(home: Path, url: str) -> subprocess.Popen[bytes]:
    """Start `runyard server` (on RUNYARD_PORT, which it reads itself) and wait until it
    answers; a server that does not is stopped before this says so."""
    home.mkdir(parents=True, exist_ok=True)
    log = home / "demo-server.log"
    print(f"$ runyard server   (RUNYARD_HOME={home}, log: {log})", flush=True)
    with open(log, "ab") as handle:
        server = subprocess.Popen(
            [*RUNYARD, "server"], stdout=handle, stderr=subprocess.STDOUT, cwd=REPO
        )
    try:
        started = wait_until_up(
            url,
            alive=lambda: server.poll() is None,
            interval=0.3,
            waiting=lambda: print(".", end="", flush=True),
        )
    except BaseException:
        stop_server(server)
        raise
    if not started:
        stop_server(server)
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise ServerDidNotStart(f"the server did not start at {url}:\n{tail}")
    print(f" up at {url}", flush=True)
    return server


def stop_server(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is not None:
        return
    print("\nStopping the server", flush=True)
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()


def main() -> int:
    home = runyard_home()
    # SIGTERM (a CI job cancelled, `kill`) ends the demo as Ctrl-C does: through the
    # finally below, which stops the server it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    url, _token = discover()
    if not os.environ.get(variables.URL) and not (home / "server.json").exists():
        url = f"http://127.0.0.1:{port()}"  # no server recorded: the one started here
    server = None
    if is_up(url):
        print(f"Using the Runyard server already running at {url}")
    else:
        url = f"http://127.0.0.1:{port()}"
        os.environ[variables.URL] = url  # each step below talks to the server started here
        try:
            server = start_server(home, url)
        except ServerDidNotStart as exc:
            print(f"\n{exc}", file=sys.stderr)
            return 1
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
