"""Beat's safety sweep costs what can change: every job that is moving, and of the jobs
waiting for capacity only a batch, each now and then; what frees capacity wakes the line."""

from __future__ import annotations

import uuid
from datetime import timedelta

from service.jobs import repository
from service.jobs.models import JobLease, TrainingJob
from service.jobs.states import Status
from service.kit.db import session_scope, utcnow


def _jobs(
    url: str,
    count: int,
    *,
    admitted: bool,
    priority: int = 0,
    status: Status = Status.IN_PROGRESS,
    restart_cause: str | None = None,
) -> list[str]:
    ids = []
    with session_scope(url) as session:
        for _ in range(count):
            job = TrainingJob(
                id=uuid.uuid4().hex,
                name=f"job-{uuid.uuid4().hex[:8]}",
                spec={"priority": priority},
                backend="local",
                status=status,
                secondary_status="Pending",
                admitted_at=utcnow() if admitted else None,
                restart_cause=restart_cause,
            )
            job.lease = JobLease()
            session.add(job)
            ids.append(job.id)
    return ids


def _sweep(url: str, every: float = 30.0, batch: int = 3) -> list[str]:
    with session_scope(url) as session:
        return repository.sweep_job_ids(session, waiting_every=every, batch=batch)


def test_moving_jobs_every_time_waiting_ones_a_batch_at_a_time(database_url: str) -> None:
    running = _jobs(database_url, 2, admitted=True)
    waiting = _jobs(database_url, 5, admitted=False)
    stopping = _jobs(database_url, 1, admitted=False, status=Status.STOPPING)
    restarting = _jobs(database_url, 1, admitted=False, restart_cause="a retried failure")
    _jobs(database_url, 1, admitted=True, status=Status.COMPLETED)

    first = _sweep(database_url)
    moving = set(running + stopping + restarting)
    assert moving <= set(first)
    assert len(set(first) - moving) == 3  # a batch of the waiting
    second = _sweep(database_url)
    assert moving <= set(second)
    # The rest of the line, then nobody waiting until their turn comes round again.
    assert set(second) - moving == set(waiting) - set(first)
    assert set(_sweep(database_url)) == moving

    # Once waiting_every has passed, the waiting are swept again.
    with session_scope(database_url) as session:
        for lease in session.query(JobLease):
            lease.swept_at = utcnow() - timedelta(seconds=31)
    assert len(set(_sweep(database_url)) - moving) == 3


def test_the_first_in_line_go_by_priority_then_age(database_url: str) -> None:
    old = _jobs(database_url, 2, admitted=False)
    urgent = _jobs(database_url, 1, admitted=False, priority=10)
    _jobs(database_url, 1, admitted=True, priority=100)  # admitted: not in line
    with session_scope(database_url) as session:
        assert repository.first_in_line(session, 2) == [urgent[0], old[0]]
        assert repository.holds_capacity(session, urgent[0]) is False
