"""One reconciler per job at a time, and no request lost while one is working."""

from __future__ import annotations

import time

from service.jobs import repository
from service.jobs.models import JobLease, TrainingJob
from service.jobs.states import Status
from service.kit.db import session_scope

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


def test_only_one_holder_at_a_time(database_url: str) -> None:
    _job(database_url)
    assert _in(database_url, repository.claim_lease, JOB_ID, "first", 30)
    assert not _in(database_url, repository.claim_lease, JOB_ID, "second", 30)
    assert _in(database_url, repository.release_lease, JOB_ID, "first")
    assert _in(database_url, repository.claim_lease, JOB_ID, "second", 30)


def test_request_during_a_pass_keeps_the_holder_going(database_url: str) -> None:
    _job(database_url)
    assert _in(database_url, repository.claim_lease, JOB_ID, "holder", 30)
    assert _in(database_url, repository.start_pass, JOB_ID, "holder", 30)
    # Someone asks while the pass runs; their claim fails, but the holder must not let go.
    _in(database_url, repository.request_reconcile, JOB_ID)
    assert not _in(database_url, repository.claim_lease, JOB_ID, "latecomer", 30)
    assert not _in(database_url, repository.release_lease, JOB_ID, "holder")
    assert _in(database_url, repository.start_pass, JOB_ID, "holder", 30)  # consumes the request
    assert _in(database_url, repository.release_lease, JOB_ID, "holder")


def test_a_lapsed_lease_can_be_taken_over(database_url: str) -> None:
    _job(database_url)
    assert _in(database_url, repository.claim_lease, JOB_ID, "dead-worker", 0.05)
    time.sleep(0.1)
    assert _in(database_url, repository.claim_lease, JOB_ID, "new-worker", 30)
    # The old holder has lost it: its next pass must not start.
    assert not _in(database_url, repository.start_pass, JOB_ID, "dead-worker", 30)
    _in(database_url, repository.drop_lease, JOB_ID, "new-worker")
    assert _in(database_url, repository.claim_lease, JOB_ID, "third", 30)
