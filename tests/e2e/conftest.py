"""A real Runyard: API, Celery worker and beat as separate processes on a real broker.

Each stack gets its own RUNYARD_HOME, port and queue. At teardown no process of any of
its jobs may be left: that is checked (and enforced) for every test that used it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioning.local import processes
from provisioning.local.backend import free_port
from runyard.client import Client, RunyardError, admin_token, wait_until_up
from tests import postgres
from tests.conftest import POSTGRES_ADMIN_URL, RABBITMQ_URL, REDIS_URL
from tests.timeouts import scaled

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TERMINAL = ("Completed", "Failed", "Stopped")


def _without_banner(lines: list[str]) -> list[str]:
    """A process's log without Celery's start-up banner (its ASCII art, configuration and
    task list, and the warning about running as root): from its first timestamped line."""
    first = next((i for i, line in enumerate(lines) if _TIMESTAMPED.match(line)), None)
    if first is None or not any("celery" in line.lower() for line in lines[:first]):
        return lines
    return lines[first:]


_TIMESTAMPED = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _process_line(pid: int) -> str:
    """A process as ps would show it, with the kernel function it sleeps in."""
    proc = Path("/proc") / str(pid)
    try:
        argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        wchan = (proc / "wchan").read_text()
    except OSError:
        return f"{pid}: gone"
    return f"{pid} ppid={stat[1]} state={stat[0]} wchan={wchan}: {argv[:300]}"


def log_lines(client: Client, name: str) -> list[str]:
    """What a job's instances printed, in order (its other events left out)."""
    return [str(event["message"]) for event in client.logs(name) if "message" in event]


class Stack:
    def __init__(
        self, home: Path, database_url: str, broker_url: str, python: str = sys.executable
    ) -> None:
        """``python`` runs the server, and so (on the local backend) every instance."""
        self.home = home
        self.python = python
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")},
            "RUNYARD_HOME": str(home),
            "RUNYARD_DATABASE_URL": database_url,
            "RUNYARD_BROKER_URL": broker_url,
            "RUNYARD_PUBLIC_URL": self.url,
            "RUNYARD_QUEUE": f"runyard-e2e-{uuid.uuid4().hex[:8]}",
            # Tests keep their code and data in pytest's temporary directories (beside the
            # home) and in the examples.
            "RUNYARD_FILE_ROOTS": f"{home.parent}:{EXAMPLES}",
            # Fast clocks, so failures and stops are seen within a test's patience.
            "RUNYARD_RECONCILE_INTERVAL": "0.5",
            "RUNYARD_RUNNING_SWEEP_SECONDS": "0.5",
            "RUNYARD_RECONCILE_LEASE_SECONDS": "5",
            "RUNYARD_STOP_GRACE_SECONDS": "5",
            "RUNYARD_TEARDOWN_GRACE_SECONDS": "2",
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        # What a backend's fixture says of a job's instances, when a wait fails, and
        # what of a job its cluster still holds.
        self.describe_cluster: Callable[[dict[str, Any]], str] | None = None
        self.cluster_left: Callable[[dict[str, Any]], list[Any]] | None = None

    def start(
        self, part: str, *args: str, key: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``runyard <part> <args>``, known (and logged) as ``key``, by default the
        part: a second worker or API replica needs a key of its own (and ``env`` for the
        settings it does not share)."""
        key = key or part
        with open(self.home / f"{key}.log", "ab") as log:
            process = subprocess.Popen(
                [self.python, "-m", "runyard", part, *args],
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.home,
            )
        self.processes[key] = process
        return process

    def up(self, host: str = "127.0.0.1") -> Stack:
        """Start the API (listening on ``host``), the worker and beat."""
        self.home.mkdir(parents=True, exist_ok=True)
        api = self.start("api", "--host", host, "--port", str(self.port))
        if not wait_until_up(self.url, alive=lambda: api.poll() is None):
            raise RuntimeError(f"API did not start:\n{self.log_tail('api')}")
        self.start("worker")
        self.start("beat")
        return self

    def client(self) -> Client:
        return Client(self.url, admin_token(self.home))

    def kill(self, part: str) -> None:
        process = self.processes.pop(part)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def log_tail(self, part: str, lines: int = 60) -> str:
        path = self.home / f"{part}.log"
        if not path.exists():
            return ""
        text = path.read_text(errors="replace").splitlines()
        return "\n".join(_without_banner(text)[-lines:])

    def explain(self, job: dict[str, Any], events: list[dict[str, Any]] | None = None) -> str:
        """Why a job is where it is: its status and reason, its transitions, what the
        cluster says of it (``describe_cluster``), its last lines, then the stack's logs."""
        parts = [
            f"{job['name']}: {job['status']}/{job['secondary_status']}: {job['failure_reason']}",
            "--- transitions ---",
            *(
                f"{t['start_time']} {t['status']}/{t['secondary_status']}: {t['message']}"
                for t in job["transitions"]
            ),
        ]
        if self.describe_cluster is not None:
            parts += ["--- cluster ---", self.describe_cluster(job)]
        if events is not None:
            parts += ["--- job ---"]
            parts += [f"[{e['host']}] {e['stream']}: {e['message']}" for e in events[-40:]]
        return "\n".join([*parts, self.diagnostics()])

    def unfinished(self) -> str:
        """Every job of the stack that has not ended, explained, with what each of its
        processes is doing: where a test gave up on a job that never ended."""
        parts = []
        with self.client() as client:
            for item in client.list_jobs(limit=100)["items"]:
                if item["status"] in TERMINAL:
                    continue
                with Client(self.url, client.token, project=item["project"]) as scoped:
                    job = scoped.get_job(item["name"])
                    events = None
                    with contextlib.suppress(Exception):
                        events = [e for e in scoped.logs(job["name"]) if "message" in e]
                parts += [self.explain(job, events), "--- its processes ---"]
                parts += [_process_line(pid) for pid in processes.marked_processes(job["id"])]
        return "\n".join(parts) or f"every job of the stack has ended\n{self.diagnostics()}"

    def diagnostics(self) -> str:
        return "\n".join(
            f"--- {part} ---\n{self.log_tail(part)}" for part in ("api", "worker", "beat")
        )

    def submit(self, client: Client, example: str | Path, **spec: Any) -> dict[str, Any]:
        source = example if isinstance(example, Path) else EXAMPLES / example
        spec.setdefault("instance_type", "local")
        return client.create_job({"source_uri": client.upload_source(source), **spec})

    def wait_for(
        self,
        client: Client,
        name: str,
        condition: Callable[[dict[str, Any]], bool],
        timeout: float = 120,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                job = client.get_job(name)
            except RunyardError as exc:
                # The server did not answer (it went away, or dropped the request): what
                # its processes last logged says why, and whether it is still there.
                ended = {
                    key: process.returncode
                    for key, process in self.processes.items()
                    if process.poll() is not None
                }
                pytest.fail(f"{exc}\nended, with their codes: {ended}\n{self.diagnostics()}")
            if condition(job):
                return job
            if time.monotonic() > deadline:
                where = f"{job['status']}/{job['secondary_status']}"
                events = None
                with contextlib.suppress(Exception):  # the job's log, if the API answers
                    events = [e for e in client.logs(name) if "message" in e]
                pytest.fail(f"{name} stuck in {where}\n{self.explain(job, events)}")
            time.sleep(0.2)

    def wait_until_ended(self, client: Client, name: str, timeout: float = 120) -> dict[str, Any]:
        """The job once it has ended, and once its instances are removed: a job reads as
        ended first, and its instances go after (worker.reconciler.ending)."""
        job = self.wait_for(client, name, lambda job: job["status"] in TERMINAL, scaled(timeout))
        self.wait_until_removed(job)
        return job

    def wait_until_removed(self, job: dict[str, Any], timeout: float = 60) -> None:
        """Until nothing of an ended job's instances is left: a local job's processes and
        directory, and what its cluster holds (``cluster_left``)."""
        deadline = time.monotonic() + timeout
        while left := self._left_of(job):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{job['name']} ended {timeout:g} s ago and still has {left}\n"
                    f"{self.diagnostics()}"
                )
            time.sleep(0.1)

    def _left_of(self, job: dict[str, Any]) -> list[Any]:
        left: list[Any] = []
        if (self.home / "jobs" / job["id"]).exists():
            left.append("its directory")
        left += processes.marked_processes(job["id"])
        if self.cluster_left is not None:
            left += self.cluster_left(job)
        return left

    def job_ids(self) -> list[str]:
        ids, cursor = [], None
        with self.client() as client:
            while True:
                page = client.list_jobs(limit=100, cursor=cursor)
                for item in page["items"]:
                    # Named in its own project: the admin's token reaches every project.
                    with Client(self.url, client.token, project=item["project"]) as scoped:
                        ids.append(scoped.get_job(item["name"])["id"])
                cursor = page["next_cursor"]
                if cursor is None:
                    return ids

    def down(self) -> list[int]:
        """Stop the stack; returns (after killing them) any processes its jobs left."""
        job_ids = (
            self.job_ids()
            if self.processes.get("api") and self.processes["api"].poll() is None
            else []
        )
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
        leftovers = [pid for job_id in job_ids for pid in processes.marked_processes(job_id)]
        processes.signal_pids(leftovers, signal.SIGKILL)
        return leftovers


@pytest.fixture(scope="module")
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """Embedded defaults: SQLite database and SQLite (kombu sqla) broker, and whatever
    settings the test module asks for in its ``STACK_SETTINGS``."""
    home = tmp_path_factory.mktemp("runyard-home")
    running = Stack(
        home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}"
    )
    running.env.update(getattr(request.module, "STACK_SETTINGS", {}))
    running.up()
    yield running
    assert running.down() == [], "processes of finished jobs were left running"


@pytest.fixture(scope="module", params=[pytest.param("redis", marks=pytest.mark.redis), "rabbitmq"])
def server_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A team's deployment: PostgreSQL with Redis or RabbitMQ as the broker."""
    broker = REDIS_URL if request.param == "redis" else RABBITMQ_URL
    with postgres.empty_database(POSTGRES_ADMIN_URL, "runyard_e2e") as database_url:
        home = tmp_path_factory.mktemp(f"runyard-{request.param}")
        running = Stack(home, database_url, broker).up()
        try:
            yield running
            assert running.down() == [], "processes of finished jobs were left running"
        finally:
            running.down()  # a no-op unless the assertion above was never reached
