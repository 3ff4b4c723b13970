"""Beat's safety sweep costs what can change: every job that is moving, and of the jobs
waiting for capacity the first in line and the spot jobs (whose max_wait runs), each now
and then; what frees capacity wakes the line."""

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


def _sweep(url: str) -> list[str]:
    with session_scope(url) as session:
        return repository.sweep_job_ids(session, waiting_every=30.0, heads=2, batch=2)


def test_moving_jobs_every_time_waiting_ones_only_at_the_front_or_on_a_clock(
    database_url: str,
) -> None:
    running = _jobs(database_url, 2, admitted=True)
    front = _jobs(database_url, 2, admitted=False, priority=5)
    deep = _jobs(database_url, 4, admitted=False)
    spot = _jobs(database_url, 3, admitted=False, spot=True)
    stopping = _jobs(database_url, 1, admitted=False, status=Status.STOPPING)
    restarting = _jobs(database_url, 1, admitted=False, restart_cause="a retried failure")
    _jobs(database_url, 1, admitted=True, status=Status.COMPLETED)
    moving = set(running + stopping + restarting)

    first = set(_sweep(database_url))
    assert first - moving == set(front) | set(spot[:2])
    assert moving <= first
    second = set(_sweep(database_url))
    # The front was just swept: the next in line and the last spot job have their turn.
    assert second - moving == {deep[0], deep[1], spot[2]}
    assert set(_sweep(database_url)) - moving == {deep[2], deep[3]}
    assert set(_sweep(database_url)) == moving  # everyone waiting was seen a moment ago

    # Once waiting_every has passed, the front is swept again, first.
    with session_scope(database_url) as session:
        for lease in session.query(JobLease):
            lease.swept_at = utcnow() - timedelta(seconds=31)
    assert set(_sweep(database_url)) - moving == set(front) | set(spot[:2])


def test_the_first_in_line_go_by_priority_then_age(database_url: str) -> None:
    old = _jobs(database_url, 2, admitted=False)
    urgent = _jobs(database_url, 1, admitted=False, priority=10)
    _jobs(database_url, 1, admitted=True, priority=100)  # admitted: not in line
    with session_scope(database_url) as session:
        assert repository.first_in_line(session, 2) == [urgent[0], old[0]]
        assert repository.holds_capacity(session, urgent[0]) is False
