"""Running Runyard's processes: the API, the Celery worker, beat, or all three together.

``runyard server`` is the embedded mode: the API runs in this process and the worker and
beat run as child processes that are restarted if they die and end when the server ends.
For compose and Kubernetes each part runs on its own (``runyard api|worker|beat``).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from service.auth.service import ensure_admin_token
from service.kit.db import session_scope
from service.kit.migrate import upgrade
from service.settings import Settings

log = logging.getLogger("runyard.server")

_PR_SET_PDEATHSIG = 1


def prepare(settings: Settings) -> str:
    """Create RUNYARD_HOME, bring the schema up to date, make sure an admin token exists."""
    settings.home.mkdir(parents=True, exist_ok=True)
    settings.jobs_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.database_url)
    settings.signing_key()
    with session_scope(settings.database_url) as session:
        configured = settings.admin_token.get_secret_value() if settings.admin_token else None
        return ensure_admin_token(session, settings.home / "token", configured)


def run_api(settings: Settings, host: str, port: int) -> None:
    prepare(settings)
    _serve_api(settings, host, port)


def _serve_api(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    from service.app import create_app

    server_file = settings.home / "server.json"
    server_file.write_text(json.dumps({"url": _client_url(host, port), "pid": os.getpid()}))
    # uvicorn shuts down gracefully, then re-raises the SIGTERM it caught; with the
    # default handler that would end the process before any cleanup below ran.
    signal.signal(signal.SIGTERM, _exit_quietly)
    try:
        uvicorn.run(create_app(settings), host=host, port=port, log_level="info", access_log=False)
    finally:
        _remove_if_ours(server_file)


# The sweep runs every couple of seconds; one INFO line per task would bury everything else.
_CHATTY_LOGGERS = (
    "celery.app.trace",
    "celery.worker.strategy",
    "celery.worker.request",
    "celery.beat",
)


def _quiet_celery() -> None:
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def run_worker(settings: Settings, concurrency: int = 4) -> None:
    from celery.signals import after_setup_logger

    from worker.celery_app import create_celery

    after_setup_logger.connect(lambda **_: _quiet_celery(), weak=False)
    app = create_celery(settings)
    app.worker_main(
        [
            "worker",
            "--loglevel=INFO",
            "--pool=threads",
            f"--concurrency={concurrency}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            f"--hostname=runyard-{socket.gethostname()}-{os.getpid()}",
        ]
    )


def run_beat(settings: Settings) -> None:
    from celery.signals import after_setup_logger

    from worker.celery_app import create_celery

    settings.home.mkdir(parents=True, exist_ok=True)
    after_setup_logger.connect(lambda **_: _quiet_celery(), weak=False)
    create_celery(settings).Beat(loglevel="INFO").run()


def run_all(settings: Settings, host: str, port: int) -> None:
    env = {
        **os.environ,
        "RUNYARD_PUBLIC_URL": settings.public_url,
        "RUNYARD_HOME": str(settings.home),
    }
    prepare(settings)  # before the children start, so they find the schema in place
    children = Supervisor(
        {
            "worker": [sys.executable, "-m", "runyard", "worker"],
            "beat": [sys.executable, "-m", "runyard", "beat"],
        },
        env,
    )
    children.start()
    try:
        _serve_api(settings, host, port)
    finally:
        children.stop()


def _exit_quietly(_signum: int, _frame: object) -> None:
    sys.exit(0)


def _client_url(host: str, port: int) -> str:
    reachable = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 (comparing, not binding)
    return f"http://{reachable}:{port}"


def _remove_if_ours(server_file: Path) -> None:
    try:
        if json.loads(server_file.read_text()).get("pid") == os.getpid():
            server_file.unlink()
    except (OSError, ValueError):
        pass


def _die_with_parent() -> None:
    # Runs in the child before exec: if the server is killed outright, its worker and
    # beat get SIGTERM instead of running on as orphans.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Supervisor:
    """Keeps child processes running, restarting each with back-off when it dies."""

    def __init__(self, commands: dict[str, list[str]], env: dict[str, str]) -> None:
        self.commands = commands
        self.env = env
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._stopping = threading.Event()
        # The children are started from this thread: a parent-death signal follows the
        # thread that forked, so it must live as long as the server.
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)
        self._started = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._started.wait(timeout=30)

    def stop(self, timeout: float = 15.0) -> None:
        self._stopping.set()
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + timeout
        for name, process in self.processes.items():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0f s; killing it", name, timeout)
                process.kill()
                process.wait()
        self._thread.join(timeout=5)

    def _spawn(self, name: str) -> None:
        self.processes[name] = subprocess.Popen(
            self.commands[name],
            env=self.env,
            preexec_fn=_die_with_parent,
        )

    def _run(self) -> None:
        for name in self.commands:
            self._spawn(name)
        self._started.set()
        backoff = dict.fromkeys(self.commands, 1.0)
        while not self._stopping.wait(0.5):
            for name, process in list(self.processes.items()):
                code = process.poll()
                if code is None or self._stopping.is_set():
                    continue
                log.warning(
                    "%s exited with code %s; restarting in %.0f s", name, code, backoff[name]
                )
                if self._stopping.wait(backoff[name]):
                    return
                backoff[name] = min(backoff[name] * 2, 30.0)
                self._spawn(name)
