"""Jobs submitted while another batch is being stored are stored together, in one
transaction; a job that cannot be stored fails alone."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, func, select
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from service.capacity import service as capacity
from service.jobs import service
from service.jobs.models import JobLease, TrainingJob
from service.jobs.schemas import JobCreate
from service.jobs.submissions import Submissions
from service.kit.db import get_engine, session_scope
from service.kit.errors import Conflict
from service.settings import Settings
from tests.conftest import job_spec
from tests.jobs import named


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # A type with little room: each batch forecasts its jobs (and the first job runs).
    return settings.model_copy(update={"capacity": {"local": 1}})


@contextmanager
def _storing_held(settings: Settings) -> Iterator[None]:
    """Hold back any batch from storing: on PostgreSQL by the lock that waking the line
    takes (each batch's forecast waits for it), on SQLite by its write lock."""
    if settings.database_url.startswith("sqlite"):
        writer = sqlite3.connect(settings.database_url.removeprefix("sqlite:///"))
        writer.isolation_level = None
        writer.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            writer.execute("COMMIT")
            writer.close()
        return
    # An engine of its own: its commit is not one of the batches'.
    holder = create_engine(settings.database_url, poolclass=NullPool)
    try:
        with Session(holder) as session, session.begin():
            capacity.wake_after_forecasts(session)
            yield
    finally:
        holder.dispose()


@contextmanager
def _counting_commits(settings: Settings) -> Iterator[list[int]]:
    commits: list[int] = []
    engine = get_engine(settings.database_url)

    def count(_connection: object) -> None:
        commits.append(1)

    event.listen(engine, "commit", count)
    try:
        yield commits
    finally:
        event.remove(engine, "commit", count)


def _until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _submit_while_held(
    settings: Settings, source_dir: Path, names: list[str]
) -> tuple[list[Future[TrainingJob]], int]:
    """Submit ``names`` at once, the first while no batch can store: the first batch holds
    it, the rest wait behind. The outcomes, and how many transactions committed."""
    submissions = Submissions(settings)
    prepared = [
        service.prepare(settings, JobCreate.model_validate(job_spec(source_dir, name=n)), "default")
        for n in names
    ]
    with _counting_commits(settings) as commits, ThreadPoolExecutor(len(names)) as pool:
        with _storing_held(settings):
            first = pool.submit(submissions.store, prepared[0], "default")
            _until(lambda: submissions.waiting == 0)  # the first batch took it and waits
            rest = [pool.submit(submissions.store, each, "default") for each in prepared[1:]]
            _until(lambda: submissions.waiting == len(rest))
        outcomes = [first, *rest]
        for outcome in outcomes:
            outcome.exception(timeout=60)
    return outcomes, len(commits)


def test_jobs_submitted_while_a_batch_is_stored_are_stored_together(
    settings: Settings, source_dir: Path
) -> None:
    names = [f"together-{n}" for n in range(12)]
    outcomes, commits = _submit_while_held(settings, source_dir, names)
    assert [outcome.result().name for outcome in outcomes] == names
    assert commits == 2  # the first alone, then the eleven that waited behind it
    with session_scope(settings.database_url) as session:
        leases = session.scalars(
            select(JobLease.job_id).where(
                JobLease.job_id.in_([named(session, n).id for n in names])
            )
        ).all()
        assert len(leases) == len(names)
        # The first fits and is left to the worker; the rest wait in line behind it.
        assert named(session, names[0]).pending_reason is None
        assert (named(session, names[-1]).pending_reason or "").startswith("Waiting")


def test_a_name_in_use_fails_its_own_job_and_no_other_of_its_batch(
    settings: Settings, source_dir: Path
) -> None:
    with session_scope(settings.database_url) as session:
        taken = JobCreate.model_validate(job_spec(source_dir, name="taken"))
        service.submit(session, settings, taken, "default")
    names = ["first", "one", "taken", "two", "two", "three"]
    outcomes, _commits = _submit_while_held(settings, source_dir, names)
    errors = {
        index: outcome.exception()
        for index, outcome in enumerate(outcomes)
        if outcome.exception() is not None
    }
    assert sorted(errors) == [2, 4]  # "taken", and the second "two"
    assert all(isinstance(error, Conflict) for error in errors.values())
    assert "'taken' already exists" in str(errors[2])
    with session_scope(settings.database_url) as session:
        stored = session.scalars(select(func.count()).select_from(TrainingJob)).one()
    assert stored == 5  # taken, first, one, two, three


def test_a_lone_submission_is_stored_at_once(settings: Settings, source_dir: Path) -> None:
    submissions = Submissions(settings)
    prepared = service.prepare(
        settings, JobCreate.model_validate(job_spec(source_dir, name="alone")), "default"
    )
    with _counting_commits(settings) as commits:
        job = submissions.store(prepared, "default")
    assert job.name == "alone"
    assert len(commits) == 1
    assert submissions.waiting == 0


def test_many_threads_at_once_each_get_their_own_job(settings: Settings, source_dir: Path) -> None:
    submissions = Submissions(settings)
    names = [f"busy-{n}" for n in range(40)]
    barrier = threading.Barrier(len(names))

    def submit(name: str) -> str:
        prepared = service.prepare(
            settings, JobCreate.model_validate(job_spec(source_dir, name=name)), "default"
        )
        barrier.wait()
        return submissions.store(prepared, "default").name

    with ThreadPoolExecutor(len(names)) as pool:
        assert list(pool.map(submit, names)) == names
    with session_scope(settings.database_url) as session:
        assert {named(session, name).name for name in names} == set(names)
