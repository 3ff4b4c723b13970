"""Triggers for the worker go out together: one message names the jobs whose triggers
came within the linger, and the worker drives a message's jobs side by side."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from sqlalchemy import update

from provisioning.base import Backend, JobRef, Materialized
from provisioning.local.backend import LocalPlan
from service.jobs.models import TrainingJob
from service.jobs.schemas import JobCreate
from service.kit import enqueue
from service.kit.db import session_scope
from service.settings import Settings
from service.training import service
from tests.conftest import REDIS_URL, job_spec
from tests.instances import SleepingInstances
from tests.jobs import SERVER_ADMIN, job_id, job_state, submit
from worker.reconciler import Reconciler


@pytest.fixture
def on_redis(settings: Settings) -> Iterator[Settings]:
    """The settings with a queue of this test's own on the test Redis."""
    queue = f"triggers-{uuid.uuid4().hex[:8]}"
    yield settings.model_copy(update={"broker_url": REDIS_URL, "queue": queue})
    with Connection(REDIS_URL) as connection:
        connection.SimpleQueue(queue).clear()


def _messages(settings: Settings, wanted: int) -> list[tuple[str, list[Any]]]:
    """The task name and arguments of the next ``wanted`` messages on the queue, which
    then holds no more (none comes within half a second)."""
    found = []
    with Connection(settings.broker_url) as connection:
        messages = connection.SimpleQueue(settings.queue)
        for _ in range(wanted):
            message = messages.get(timeout=10)
            message.ack()
            args, _kwargs, _embed = message.decode()
            found.append((message.headers["task"], args))
        with pytest.raises(messages.Empty):  # and no more
            messages.get(timeout=0.5)
        messages.close()
    return found


@pytest.mark.redis
def test_triggers_that_come_together_go_in_one_message(
    on_redis: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A linger no pause of a loaded test machine outlasts.
    monkeypatch.setattr(enqueue, "LINGER_SECONDS", 1.0)
    ids = [uuid.uuid4().hex for _ in range(2 * enqueue.BATCH_MOST + 3)]
    with session_scope(on_redis.database_url) as session:
        for job in [ids[0], *ids]:  # the first twice in a row: it is named once
            enqueue.enqueue_reconcile(session, on_redis, job)
    sent = _messages(on_redis, 3)
    assert [task for task, _args in sent] == [enqueue.RECONCILE_TASK] * 3
    batches = [args[0] for _task, args in sent]
    assert [job for batch in batches for job in batch] == ids
    assert [len(batch) for batch in batches] == [
        enqueue.BATCH_MOST - 1,
        enqueue.BATCH_MOST,
        len(ids) - 2 * enqueue.BATCH_MOST + 1,
    ]


@pytest.mark.redis
def test_a_lone_trigger_goes_alone_without_waiting_for_a_full_batch(on_redis: Settings) -> None:
    with session_scope(on_redis.database_url) as session:
        enqueue.enqueue_reconcile(session, on_redis, "a" * 32)
    assert _messages(on_redis, 1) == [(enqueue.RECONCILE_TASK, [["a" * 32]])]


class _SlowToLaunch(SleepingInstances):
    """Sleepers whose launch of one job waits until the test lets it go."""

    def __init__(self, jobs_dir: Path, slow_job: str) -> None:
        super().__init__(jobs_dir)
        self.slow_job = slow_job
        self.let_go = threading.Event()

    def start(self, materialized: Materialized[LocalPlan]) -> None:
        if materialized.plan.job_name == self.slow_job:
            assert self.let_go.wait(60), "the test never let the slow launch go"
        super().start(materialized)


def test_one_slow_launch_does_not_hold_back_the_rest_of_its_batch(
    settings: Settings, source_dir: Path
) -> None:
    slow = submit(settings, source_dir, name="slow")
    quick = submit(settings, source_dir, name="quick")
    backend = _SlowToLaunch(settings.jobs_dir, slow)

    def build(_name: str, _settings: Settings) -> Backend[Any]:
        return backend

    batch = threading.Thread(
        target=Reconciler(settings, build).reconcile_all,
        args=([job_id(settings, slow), job_id(settings, quick)],),
    )
    batch.start()
    try:
        deadline = time.monotonic() + 60
        while not backend.launches and time.monotonic() < deadline:
            time.sleep(0.05)
        # The job after the slow one in the message launched while the slow one waited
        # (in order, the quick one could not launch before the slow one is let go).
        assert backend.launches == [0]
        # The slow one reaches its launch too, however its thread was scheduled.
        while job_state(settings, slow)["secondary"] != "LaunchingInstances":
            assert time.monotonic() < deadline, job_state(settings, slow)
            time.sleep(0.05)
    finally:
        backend.let_go.set()
        batch.join(60)
    assert backend.launches == [0, 0]
    for name in (slow, quick):
        backend.teardown(JobRef(job_id(settings, name), name))


def test_a_job_that_cannot_be_driven_leaves_the_others_of_its_batch_alone(
    settings: Settings, source_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lost = submit(settings, source_dir, name="lost")
    kept = submit(settings, source_dir, name="kept")
    # A backend this server no longer has: building it fails before any pass can start.
    with session_scope(settings.database_url) as session:
        session.execute(
            update(TrainingJob).where(TrainingJob.name == lost).values(backend="retired")
        )
    backend = SleepingInstances(settings.jobs_dir)

    def build(name: str, _settings: Settings) -> Backend[Any]:
        if name != "local":
            raise KeyError(f"unknown backend {name!r}")
        return backend

    Reconciler(settings, build).reconcile_all([job_id(settings, lost), job_id(settings, kept)])
    assert backend.launches == [0]
    assert job_state(settings, kept)["secondary"] == "LaunchingInstances"
    assert f"reconciling job {job_id(settings, lost)} failed" in caplog.text
    backend.teardown(JobRef(job_id(settings, kept), kept))


def _queued_on_redis(on_redis: Settings) -> Settings:
    # Room for one job: the next waits in line.
    return on_redis.model_copy(
        update={"capacity": {"local": 1}, "stop_grace_seconds": 0.0, "teardown_grace_seconds": 0.5}
    )


@pytest.mark.redis
def test_a_job_that_must_wait_is_stored_waiting_and_wakes_when_capacity_frees(
    on_redis: Settings, source_dir: Path
) -> None:
    settings = _queued_on_redis(on_redis)
    backend = SleepingInstances(settings.jobs_dir)
    reconciler = Reconciler(settings, lambda _name, _settings: backend)
    first = submit(settings, source_dir, name="first")
    assert _messages(settings, 1) == [(enqueue.RECONCILE_TASK, [[job_id(settings, first)]])]
    reconciler.reconcile(job_id(settings, first))
    assert backend.launches == [0]

    second = submit(settings, source_dir, name="second")
    # Waiting from the start, saying why, and nothing sent: the worker has nothing to do
    # for it until capacity frees.
    state = job_state(settings, second)
    assert state["secondaries"] == ["Starting", "Pending"]
    assert state["pending_reason"] == (
        "Waiting for capacity: 1 of 1 local instances are in use and the job needs 1"
    )
    assert _messages(settings, 0) == []

    with session_scope(settings.database_url) as session:
        service.stop(session, settings, first, SERVER_ADMIN)
    assert _messages(settings, 1) == [(enqueue.RECONCILE_TASK, [[job_id(settings, first)]])]
    reconciler.reconcile(job_id(settings, first))
    assert job_state(settings, first)["status"] == "Stopped"
    # The first job let go of its instance: the line hears at once.
    assert _messages(settings, 1) == [(enqueue.RECONCILE_TASK, [[job_id(settings, second)]])]
    reconciler.reconcile(job_id(settings, second))
    assert backend.launches == [0, 0]
    backend.teardown(JobRef(job_id(settings, second), second))


@pytest.mark.postgres
def test_the_wake_after_capacity_frees_waits_for_submissions_that_found_it_taken(
    on_redis: Settings, source_dir: Path
) -> None:
    if not on_redis.database_url.startswith("postgresql"):
        pytest.skip("SQLite serializes submissions and releases with its write lock")
    settings = _queued_on_redis(on_redis)
    backend = SleepingInstances(settings.jobs_dir)
    reconciler = Reconciler(settings, lambda _name, _settings: backend)
    first = submit(settings, source_dir, name="first")
    reconciler.reconcile(job_id(settings, first))
    with session_scope(settings.database_url) as session:
        service.stop(session, settings, first, SERVER_ADMIN)
    _messages(settings, 2)  # the first job's submission and stop

    woken = threading.Thread(target=reconciler.reconcile, args=(job_id(settings, first),))
    with session_scope(settings.database_url) as session:
        # A submission that finds the instance taken, still open as the first job ends.
        spec = JobCreate.model_validate(job_spec(source_dir, name="second"))
        second = service.submit(session, settings, spec, "default")
        assert second.pending_reason is not None
        woken.start()
        deadline = time.monotonic() + 30
        while job_state(settings, first)["status"] != "Stopped":
            assert time.monotonic() < deadline, "the first job never stopped"
            time.sleep(0.05)
        time.sleep(0.5)
        assert woken.is_alive()  # reading the line waits for this submission
    woken.join(30)
    assert _messages(settings, 1) == [(enqueue.RECONCILE_TASK, [[second.id]])]
    reconciler.reconcile(second.id)
    assert backend.launches == [0, 0]
    backend.teardown(JobRef(second.id, second.name))
