"""One reconciler per job at a time, and no request lost while one is working."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from service.jobs import repository
from service.jobs.models import JobLease, TrainingJob
from service.jobs.states import Status
from service.kit.db import session_scope, utcnow

# The worker takes a job's lease by the job's id.
JOB_ID = "a" * 32


def _job(url: str, name: str = "job-1") -> None:
    with session_scope(url) as session:
        job = TrainingJob(
            id=JOB_ID,
            name=name,
            spec={},
            backend="local",
            status=Status.IN_PROGRESS,
            secondary_status="Starting",
        )
        job.lease = JobLease()
        session.add(job)


def _in(url: str, action, *args):  # type: ignore[no-untyped-def]
    with session_scope(url) as session:
        return action(session, *args)


def _lease(url: str) -> tuple[str | None, datetime | None, bool]:
    with session_scope(url) as session:
        lease = session.get_one(JobLease, JOB_ID)
        return lease.owner, lease.until, lease.requested


def test_only_one_holder_at_a_time(database_url: str) -> None:
    _job(database_url)
    assert _in(database_url, repository.take_lease, JOB_ID, "first", 30)
    assert not _in(database_url, repository.take_lease, JOB_ID, "second", 30)
    # The refused taker asked for another pass: the holder must run it, not let go.
    assert not _in(database_url, repository.release_lease, JOB_ID, "first")
    assert _in(database_url, repository.start_pass, JOB_ID, "first", 30)
    assert _in(database_url, repository.release_lease, JOB_ID, "first")
    assert _lease(database_url) == (None, None, False)
    assert _in(database_url, repository.take_lease, JOB_ID, "second", 30)


def test_taking_the_lease_starts_the_first_pass(database_url: str) -> None:
    _job(database_url)
    before = utcnow()
    assert _in(database_url, repository.take_lease, JOB_ID, "holder", 30)
    owner, until, requested = _lease(database_url)
    # Nothing is asked of the holder yet: it lets go after its one pass.
    assert (owner, requested) == ("holder", False)
    assert until is not None
    assert before + timedelta(seconds=29) < until < utcnow() + timedelta(seconds=31)
    assert _in(database_url, repository.release_lease, JOB_ID, "holder")


def test_request_during_a_pass_keeps_the_holder_going(database_url: str) -> None:
    _job(database_url)
    assert _in(database_url, repository.take_lease, JOB_ID, "holder", 30)
    # Someone asks while the pass runs; they do not get the lease, and the holder must
    # not let go.
    assert not _in(database_url, repository.take_lease, JOB_ID, "latecomer", 30)
    assert _lease(database_url)[0] == "holder"
    assert not _in(database_url, repository.release_lease, JOB_ID, "holder")
    assert _in(database_url, repository.start_pass, JOB_ID, "holder", 30)  # consumes the request
    assert _in(database_url, repository.release_lease, JOB_ID, "holder")


def test_a_lapsed_lease_can_be_taken_over(database_url: str) -> None:
    _job(database_url)
    assert _in(database_url, repository.take_lease, JOB_ID, "dead-worker", 0.05)
    time.sleep(0.1)
    assert _in(database_url, repository.take_lease, JOB_ID, "new-worker", 30)
    # The old holder has lost it: its next pass must not start.
    assert not _in(database_url, repository.start_pass, JOB_ID, "dead-worker", 30)
    _in(database_url, repository.drop_lease, JOB_ID, "new-worker")
    assert _in(database_url, repository.take_lease, JOB_ID, "third", 30)
