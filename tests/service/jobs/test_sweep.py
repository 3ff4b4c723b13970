"""Beat's safety sweep costs what can change: every job with a clock of its own each time;
jobs whose instances run, the first in line and waiting spot jobs (whose max_wait runs)
now and then; what frees capacity wakes the line."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import update

from service.jobs import repository
from service.jobs.models import JobLease, TrainingJob
from service.jobs.states import TERMINAL, Stage, Status
from service.kit.db import session_scope, utcnow


def _jobs(
    url: str,
    count: int,
    *,
    admitted: bool,
    launched: bool = False,
    priority: int = 0,
    spot: bool = False,
    status: Status = Status.IN_PROGRESS,
    restart_cause: str | None = None,
) -> list[str]:
    ids = []
    with session_scope(url) as session:
        for _ in range(count):
            job = TrainingJob(
                id=uuid.uuid4().hex,
                name=f"job-{uuid.uuid4().hex[:8]}",
                spec={"priority": priority, "use_spot_instances": spot},
                priority=priority,
                backend="local",
                stage=_stage(status, admitted, launched, restart_cause),
                status=status,
                secondary_status="Pending",
                admitted_at=utcnow() if admitted else None,
                launched_at=utcnow() if launched else None,
                restart_cause=restart_cause,
            )
            job.lease = JobLease()
            session.add(job)
            ids.append(job.id)
    return ids


def _stage(status: Status, admitted: bool, launched: bool, restart_cause: str | None) -> Stage:
    """The stage the lifecycle would have moved a job of these columns to."""
    if status in TERMINAL:
        return Stage.ENDED
    if status == Status.STOPPING:
        return Stage.STOPPING
    if restart_cause is not None:
        return Stage.RESTARTING
    if not admitted:
        return Stage.QUEUED
    return Stage.RUNNING if launched else Stage.LAUNCHING


def _sweep(url: str) -> list[str]:
    with session_scope(url) as session:
        return repository.sweep_job_ids(
            session, running_every=10.0, waiting_every=30.0, heads=2, batch=2
        )


def test_what_has_a_clock_every_time_the_rest_now_and_then(database_url: str) -> None:
    running = _jobs(database_url, 2, admitted=True, launched=True)
    launching = _jobs(database_url, 1, admitted=True)
    front = _jobs(database_url, 2, admitted=False, priority=5)
    _jobs(database_url, 4, admitted=False)  # deep in line
    spot = _jobs(database_url, 3, admitted=False, spot=True)
    stopping = _jobs(database_url, 1, admitted=True, launched=True, status=Status.STOPPING)
    restarting = _jobs(database_url, 1, admitted=False, restart_cause="a retried failure")
    _jobs(database_url, 1, admitted=True, status=Status.COMPLETED)
    urgent = set(launching + stopping + restarting)

    first = set(_sweep(database_url))
    assert first - urgent == set(running) | set(front) | set(spot[:2])
    assert urgent <= first
    # The running and the front were just seen; the last spot job has its turn. The jobs
    # behind the front can only move once it has: nothing looks at them.
    assert set(_sweep(database_url)) - urgent == {spot[2]}
    assert set(_sweep(database_url)) == urgent

    # Later, the running again (every 10 s), and the front (every 30 s).
    _all_swept(database_url, seconds_ago=11)
    assert set(_sweep(database_url)) - urgent == set(running)
    _all_swept(database_url, seconds_ago=31)
    assert set(_sweep(database_url)) - urgent == set(running) | set(front) | set(spot[:2])


def _all_swept(url: str, seconds_ago: float) -> None:
    with session_scope(url) as session:
        session.execute(update(JobLease).values(swept_at=utcnow() - timedelta(seconds=seconds_ago)))


def test_the_first_in_line_go_by_priority_then_age(database_url: str) -> None:
    old = _jobs(database_url, 2, admitted=False)
    urgent = _jobs(database_url, 1, admitted=False, priority=10)
    _jobs(database_url, 1, admitted=True, priority=100)  # admitted: not in line
    with session_scope(database_url) as session:
        assert repository.first_in_line(session, 2) == [urgent[0], old[0]]
        assert repository.holds_capacity(session, urgent[0]) is False
