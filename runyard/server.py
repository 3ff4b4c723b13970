"""Running Runyard's processes: the API, the Celery worker, beat, or all three together.

``runyard server`` is the embedded mode: the API runs in this process and the worker and
beat run as child processes that are restarted if they die and end when the server ends.
For compose and Kubernetes each part runs on its own (``runyard api|worker|beat``).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runyard import variables
from runyard.client import RunyardError, wait_until_up
from service.auth.service import ensure_admin_token
from service.kit.db import session_scope
from service.kit.migrate import one_at_a_time, upgrade
from service.observability import exposition, logs
from service.settings import Settings

log = logging.getLogger("runyard.server")

_PR_SET_PDEATHSIG = 1
# How long the API may take to answer once it starts, before no "ready" line is printed.
_READY_TIMEOUT = 120.0


class AlreadyRunning(RunyardError):
    """Another server holds this RUNYARD_HOME."""


def prepare(settings: Settings) -> str:
    """Create RUNYARD_HOME, bring the schema up to date, make sure an admin token exists."""
    settings.home.mkdir(parents=True, exist_ok=True)
    settings.jobs_dir.mkdir(parents=True, exist_ok=True)
    settings.signing_key()
    if settings.tenant_quotas:
        print(
            "runyard: RUNYARD_TENANT_QUOTAS is deprecated: its entries now apply to the "
            "projects of those names; set RUNYARD_PROJECT_QUOTAS instead",
            file=sys.stderr,
        )
    # Every API replica prepares the database as it starts, and so does `runyard migrate`:
    # one after another, or they would create the same tables and tokens at once.
    with one_at_a_time(settings.database_url):
        upgrade(settings.database_url)
        with session_scope(settings.database_url) as session:
            configured = settings.admin_token.get_secret_value() if settings.admin_token else None
            return ensure_admin_token(session, settings.home / "token", configured)


class PortTaken(RunyardError):
    """Another process listens on the port: said before anything starts, since the
    server's "ready" line would otherwise be about whatever answers there."""


def check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: a port left in TIME_WAIT by a server just stopped is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise PortTaken(
                f"port {port} on {host} is taken ({exc.strerror}); choose another with "
                f"--port or {variables.PORT}"
            ) from None


def run_api(settings: Settings, host: str, port: int) -> None:
    with _holding(settings.home):
        check_port_free(host, port)
        prepare(settings)
        _serve_api(settings, host, port)


def _serve_api(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    from runyard.nodelay import NoDelayHttpToolsProtocol
    from service.app import create_app_to_serve

    url = client_url(host, port)
    server_file = settings.home / "server.json"
    server_file.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    # uvicorn shuts down gracefully, then re-raises the SIGTERM it caught; with the
    # default handler that would end the process before any cleanup below ran.
    signal.signal(signal.SIGTERM, _exit_quietly)
    serving = threading.Event()
    serving.set()
    _announce_when_ready(url, settings.home / "token", serving)
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "http": NoDelayHttpToolsProtocol,
        "root_path": settings.root_path,
        "log_level": "info",
        "log_config": logs.logging_config(settings.log_format),
        "access_log": False,
    }
    try:
        if settings.api_workers == 1:
            uvicorn.run(create_app_to_serve(settings), **options)
        else:
            # Each process builds its app from the environment, as a replica would; the
            # URL instances report to is the one thing only this process knew.
            os.environ[variables.PUBLIC_URL] = settings.public_url
            with _metrics_shared_between_processes():
                uvicorn.run(
                    "service.app:create_app_to_serve",
                    factory=True,
                    workers=settings.api_workers,
                    **options,
                )
    finally:
        serving.clear()
        _remove_if_ours(server_file)


@contextmanager
def _metrics_shared_between_processes() -> Iterator[None]:
    """Have the API processes write what they count to files of one fresh directory, so
    that whichever process answers /metrics sums them all (prometheus_client's
    multiprocess mode). Fresh, since the files of an earlier run would be summed too; the
    processes are started after this is set, and read it as they import the client."""
    directory = tempfile.mkdtemp(prefix="runyard-metrics-")
    os.environ[exposition.MULTIPROCESS_DIR] = directory
    try:
        yield
    finally:
        os.environ.pop(exposition.MULTIPROCESS_DIR, None)
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def _holding(home: Path) -> Iterator[None]:
    """Hold RUNYARD_HOME while serving. A second server on the same home would overwrite
    server.json, by which the CLI finds the first, and delete it when it could not bind;
    it must stop before it touches anything. The lock goes with the process however it
    ends, and the worker and beat do not inherit it."""
    home.mkdir(parents=True, exist_ok=True)
    lock = os.open(home / "server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyRunning(_held_by(home)) from None
        yield
    finally:
        os.close(lock)


def _held_by(home: Path) -> str:
    where = ""
    try:
        running = json.loads((home / "server.json").read_text())
        where = f" at {running['url']} (pid {running['pid']})"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return (
        f"a Runyard server is already running on {home}{where}; stop it first, "
        "or give this one another RUNYARD_HOME"
    )


def _announce_when_ready(url: str, token_file: Path, serving: threading.Event) -> None:
    """Print one line once the API answers: where it is and where its token is."""

    def announce() -> None:
        if wait_until_up(url, timeout=_READY_TIMEOUT, alive=serving.is_set):
            print(f"Runyard is ready at {url} (admin token in {token_file})", flush=True)

    threading.Thread(target=announce, name="ready", daemon=True).start()


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


def _log_as_configured(settings: Settings) -> None:
    from celery.signals import after_setup_logger, setup_logging

    if settings.log_format == "json":
        # Handled here, Celery leaves logging alone: every line goes out as JSON, the
        # warnings it gives before it would set logging up included.
        def configure(**_: object) -> None:
            logs.configure(settings.log_format)
            _quiet_celery()

        configure()
        setup_logging.connect(configure, weak=False)
    else:
        after_setup_logger.connect(lambda **_: _quiet_celery(), weak=False)


def run_worker(settings: Settings, concurrency: int = 4) -> None:
    from celery.signals import celeryd_after_setup

    from service.tuning import tasks as tuning_tasks
    from worker.celery_app import create_celery
    from worker.metrics import serve_metrics

    _log_as_configured(settings)
    # Once the worker's logging is set up, where its own lines go.
    celeryd_after_setup.connect(lambda **_: _say_what_instances_lack(settings), weak=False)
    if settings.worker_metrics_port:
        serve_metrics(settings.worker_metrics_port)
    # The tuner submits trials through the training service, which the worker's own
    # tasks never import: its task is registered here, where the parts are composed.
    app = create_celery(settings, more_tasks=[tuning_tasks.register])
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


def _say_what_instances_lack(settings: Settings) -> None:
    """What the instances of each of this server's backends lack on this machine (a
    network of their own, a way out of it), said once as the worker that starts them
    starts."""
    from provisioning import registry

    for name in sorted(set(settings.backends.values())):
        try:
            notices = registry.build(name, settings).notices()
        except Exception:  # a backend that cannot be built says so when it launches
            log.debug("could not ask the %s backend what it lacks", name, exc_info=True)
            continue
        for notice in notices:
            log.warning("%s backend: %s", name, notice)


def run_beat(settings: Settings) -> None:
    from worker.celery_app import create_celery

    settings.home.mkdir(parents=True, exist_ok=True)
    _log_as_configured(settings)
    create_celery(settings).Beat(loglevel="INFO").run()


def run_all(settings: Settings, host: str, port: int) -> None:
    env = {
        **os.environ,
        variables.PUBLIC_URL: settings.public_url,
        variables.HOME: str(settings.home),
    }
    with _holding(settings.home):
        check_port_free(host, port)
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


def client_url(host: str, port: int) -> str:
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
    """Keeps child processes running, restarting each with back-off when it dies.

    The delay doubles with each death, from ``first_delay`` up to ``longest_delay``, and
    starts again from ``first_delay`` once a child has run ``healthy_after`` seconds: a
    worker that crashes now and then over days is not one that crashes on start."""

    def __init__(
        self,
        commands: dict[str, list[str]],
        env: dict[str, str],
        *,
        first_delay: float = 1.0,
        longest_delay: float = 30.0,
        healthy_after: float = 60.0,
    ) -> None:
        self.commands = commands
        self.env = env
        self.first_delay = first_delay
        self.longest_delay = longest_delay
        self.healthy_after = healthy_after
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._spawned_at: dict[str, float] = {}
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
        self._spawned_at[name] = time.monotonic()

    def _run(self) -> None:
        for name in self.commands:
            self._spawn(name)
        self._started.set()
        delay = dict.fromkeys(self.commands, self.first_delay)
        while not self._stopping.wait(0.5):
            for name, process in list(self.processes.items()):
                code = process.poll()
                if code is None or self._stopping.is_set():
                    continue
                if time.monotonic() - self._spawned_at[name] >= self.healthy_after:
                    delay[name] = self.first_delay
                log.warning("%s exited with code %s; restarting in %.1f s", name, code, delay[name])
                if self._stopping.wait(delay[name]):
                    return
                delay[name] = min(delay[name] * 2, self.longest_delay)
                self._spawn(name)
