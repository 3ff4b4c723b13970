"""Jobs submitted while another batch is being stored are stored together, in one
transaction; a job that cannot be stored fails alone."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from service.auth.access import Principal, Role
from service.capacity import service as capacity
from service.grants.places import keys
from service.jobs.models import JobLease, JobWritePlace, TrainingJob
from service.jobs.schemas import JobCreate
from service.kit.db import get_engine, session_scope
from service.kit.errors import Conflict, Forbidden, NotFound, SpecError
from service.observability import context as observed
from service.observability.logs import JsonFormatter
from service.settings import Settings
from service.training import preparation, service
from service.training import submissions as submissions_module
from service.training.submissions import Submissions
from tests.conftest import job_spec, stored_line_count
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


async def _until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def _spec(source_dir: Path, name: str) -> JobCreate:
    return JobCreate.model_validate(job_spec(source_dir, name=name))


def _submit_while_held(
    settings: Settings, source_dir: Path, names: list[str]
) -> tuple[list[TrainingJob | BaseException], int]:
    """Submit ``names`` at once, the first while no batch can store: the first batch holds
    it, the rest wait behind. The outcomes, and how many transactions committed."""
    return _submit_specs_while_held(settings, [_spec(source_dir, name) for name in names])


def _submit_specs_while_held(
    settings: Settings, specs: list[JobCreate]
) -> tuple[list[TrainingJob | BaseException], int]:
    submissions = Submissions(settings)

    async def submit_all() -> list[TrainingJob | BaseException]:
        with _storing_held(settings):
            first = asyncio.create_task(submissions.submit(specs[0], "default"))
            await asyncio.sleep(0)  # it is in line
            await _until(lambda: submissions.waiting == 0)  # the first batch took it and waits
            rest = [asyncio.create_task(submissions.submit(spec, "default")) for spec in specs[1:]]
            await _until(lambda: submissions.waiting == len(rest))
        return await asyncio.gather(first, *rest, return_exceptions=True)

    with _counting_commits(settings) as commits:
        outcomes = asyncio.run(submit_all())
    return outcomes, len(commits)


def test_jobs_submitted_while_a_batch_is_stored_are_stored_together(
    settings: Settings, source_dir: Path
) -> None:
    names = [f"together-{n}" for n in range(12)]
    outcomes, commits = _submit_while_held(settings, source_dir, names)
    assert [_name(outcome) for outcome in outcomes] == names
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
        service.submit(session, settings, _spec(source_dir, "taken"), "default")
    names = ["first", "one", "taken", "two", "two", "three"]
    outcomes, _commits = _submit_while_held(settings, source_dir, names)
    errors = {
        index: outcome for index, outcome in enumerate(outcomes) if isinstance(outcome, Exception)
    }
    assert sorted(errors) == [2, 4]  # "taken", and the second "two"
    assert all(isinstance(error, Conflict) for error in errors.values())
    assert "'taken' already exists" in str(errors[2])
    with session_scope(settings.database_url) as session:
        stored = session.scalars(select(func.count()).select_from(TrainingJob)).one()
    assert stored == 5  # taken, first, one, two, three


def test_a_spec_refused_by_its_checks_fails_its_own_job_and_no_other_of_its_batch(
    settings: Settings, source_dir: Path
) -> None:
    spec = job_spec(source_dir, name="refused")
    spec["inputs"] = {"train": {"uri": "file://relative/data"}}  # names no place
    refused = JobCreate.model_validate(spec)
    outcomes, commits = _submit_specs_while_held(
        settings, [_spec(source_dir, "before"), refused, _spec(source_dir, "after")]
    )
    assert _name(outcomes[0]) == "before"
    assert isinstance(outcomes[1], SpecError)
    assert outcomes[1].loc == ("inputs", "train", "uri")
    assert _name(outcomes[2]) == "after"
    assert commits == 2  # "after" was stored in the second batch, without "refused"
    with session_scope(settings.database_url) as session:
        assert session.scalars(select(TrainingJob.name).order_by(TrainingJob.name)).all() == [
            "after",
            "before",
        ]


def test_a_lone_submission_is_stored_at_once(settings: Settings, source_dir: Path) -> None:
    submissions = Submissions(settings)
    with _counting_commits(settings) as commits:
        job = asyncio.run(submissions.submit(_spec(source_dir, "alone"), "default"))
    assert job.name == "alone"
    assert len(commits) == 1
    assert submissions.waiting == 0


def _after_a_batch_of_three(settings: Settings, source_dir: Path, names: list[str]) -> Submissions:
    """Submissions whose last batch held three creates (behind a first one, held)."""
    submissions = Submissions(settings)

    async def batches() -> None:
        with _storing_held(settings):
            first = asyncio.create_task(submissions.submit(_spec(source_dir, names[0]), "default"))
            await asyncio.sleep(0)  # it is in line
            await _until(lambda: submissions.waiting == 0)
            rest = [submissions.submit(_spec(source_dir, name), "default") for name in names[1:]]
            tasks = [asyncio.create_task(each) for each in rest]
            await _until(lambda: submissions.waiting == len(tasks))
        await asyncio.gather(first, *tasks)

    asyncio.run(batches())
    return submissions


def test_after_a_batch_of_several_the_next_waits_for_as_many_creates(
    settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Clients that send their next create once answered come back one by one: the thread
    # waits for as many as the last batch held, here far longer than it would need to.
    monkeypatch.setattr(submissions_module, "LINGER_SECONDS", 60.0)
    submissions = _after_a_batch_of_three(settings, source_dir, ["a", "b", "c", "d"])

    async def next_batch() -> list[TrainingJob]:
        first = asyncio.create_task(submissions.submit(_spec(source_dir, "e"), "default"))
        await asyncio.sleep(0.3)
        assert not first.done()
        assert submissions.waiting == 1  # kept back for the rest of its batch
        rest = [submissions.submit(_spec(source_dir, name), "default") for name in ("f", "g")]
        return await asyncio.wait_for(asyncio.gather(first, *rest), timeout=30)

    with _counting_commits(settings) as commits:
        started = time.monotonic()
        assert [job.name for job in asyncio.run(next_batch())] == ["e", "f", "g"]
    assert time.monotonic() - started < 30  # at once, once the three were there
    assert len(commits) == 1
    assert submissions.waiting == 0


def test_a_create_after_a_batch_of_several_waits_no_longer_than_the_linger(
    settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submissions_module, "LINGER_SECONDS", 0.5)
    submissions = _after_a_batch_of_three(settings, source_dir, ["a", "b", "c", "d"])
    started = time.monotonic()
    job = asyncio.run(submissions.submit(_spec(source_dir, "alone"), "default"))
    waited = time.monotonic() - started
    assert job.name == "alone"
    assert 0.5 <= waited < 10, waited


def test_many_requests_at_once_each_get_their_own_job(settings: Settings, source_dir: Path) -> None:
    submissions = Submissions(settings)
    names = [f"busy-{n}" for n in range(40)]

    async def submit_all() -> list[TrainingJob]:
        return await asyncio.gather(
            *(submissions.submit(_spec(source_dir, name), "default") for name in names)
        )

    assert [job.name for job in asyncio.run(submit_all())] == names
    with session_scope(settings.database_url) as session:
        assert {named(session, name).name for name in names} == set(names)


def test_event_loops_in_several_threads_each_get_their_own_jobs(
    settings: Settings, source_dir: Path
) -> None:
    # As TestClient and an API process with several loops would: each submission is
    # answered on the loop its request waits on.
    submissions = Submissions(settings)

    def submit_from_a_loop_of_its_own(name: str) -> str:
        return asyncio.run(submissions.submit(_spec(source_dir, name), "default")).name

    names = [f"loop-{n}" for n in range(8)]
    with ThreadPoolExecutor(len(names)) as pool:
        assert list(pool.map(submit_from_a_loop_of_its_own, names)) == names


def test_the_submitting_thread_ends_when_idle_and_another_starts_after(
    settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submissions_module, "IDLE_SECONDS", 0.05)
    submissions = Submissions(settings)

    def submitting_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "runyard-submissions"}

    before = submitting_threads()
    asyncio.run(submissions.submit(_spec(source_dir, "early"), "default"))
    (started,) = submitting_threads() - before
    started.join(timeout=10)
    assert not started.is_alive(), "the idle thread did not end"
    job = asyncio.run(submissions.submit(_spec(source_dir, "late"), "default"))
    assert job.name == "late"


# The thread ends with what it raised, which pytest reports as it would any thread's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_submitting_thread_that_fails_answers_its_batch_and_is_replaced(
    settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Something no create should raise, raised past the per-job handling: its batch is
    # answered with an error rather than left waiting for ever, and the next create works.
    real_store = Submissions._store
    calls = []

    def store_once_broken(self: Submissions, batch: list[Any]) -> None:
        calls.append(len(batch))
        if len(calls) == 1:
            raise SystemExit("broken")
        real_store(self, batch)

    monkeypatch.setattr(Submissions, "_store", store_once_broken)
    submissions = Submissions(settings)
    with pytest.raises(RuntimeError, match="cut short"):
        asyncio.run(submissions.submit(_spec(source_dir, "lost"), "default"))
    assert asyncio.run(submissions.submit(_spec(source_dir, "next"), "default")).name == "next"


def _name(outcome: TrainingJob | BaseException) -> str:
    assert isinstance(outcome, TrainingJob), outcome
    return outcome.name


@pytest.mark.parametrize(
    ("changes", "remote"),
    [
        ({}, False),
        ({"source_uri": "s3://bucket/code.tar.gz"}, True),
        # Its instances look at its channels, not the API (a ClientError at download).
        ({"inputs": {"train": {"uri": "s3://bucket/train/"}}}, False),
        ({"output_path": "s3://bucket/out"}, True),
        ({"checkpoint_s3_uri": "s3://bucket/checkpoints"}, True),
        # Code a channel ships is looked for in the channel (S3's HEAD) at submission.
        (
            {
                "source_uri": "/opt/ml/input/data/code/sourcedir.tar.gz",
                "inputs": {"code": "s3://bucket/code/sourcedir.tar.gz"},
            },
            True,
        ),
        (
            {
                "source_uri": "/opt/ml/input/data/code/sourcedir.tar.gz",
                "inputs": {"code": "file:///srv/code/sourcedir.tar.gz"},
            },
            False,
        ),
    ],
)
def test_specs_whose_checks_reach_s3_are_checked_in_the_thread_pool(
    settings: Settings, source_dir: Path, changes: dict[str, Any], remote: bool
) -> None:
    # The submitting thread checks the others: a slow bucket must not hold them all up.
    spec = JobCreate.model_validate({**job_spec(source_dir), **changes})
    assert preparation.checks_reach_network(settings, spec) is remote


def test_outputs_under_an_s3_artifact_root_are_checked_in_the_thread_pool(
    settings: Settings, source_dir: Path
) -> None:
    on_s3 = settings.model_copy(update={"artifact_root": "s3://bucket/runyard"})
    spec = JobCreate.model_validate(job_spec(source_dir))
    assert preparation.checks_reach_network(on_s3, spec)
    assert not preparation.checks_reach_network(settings, spec)


def test_a_job_writing_where_another_projects_job_wrote_fails_alone_in_one_read(
    settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    """Where other projects' jobs write is read once for the batch (one statement, a
    branch a job), and answers each job for its own places."""
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    with session_scope(settings.database_url) as session:
        session.add(JobWritePlace(job_id=None, project="other", key=keys(theirs.as_uri())[0]))
    specs = [
        _spec(source_dir, "before"),
        JobCreate.model_validate(
            job_spec(source_dir, name="in-theirs", output_path=theirs.as_uri())
        ),
        JobCreate.model_validate(job_spec(source_dir, name="in-ours", output_path=ours.as_uri())),
        # Above their place: writing there would write over theirs.
        JobCreate.model_validate(
            job_spec(source_dir, name="above", checkpoint_s3_uri=tmp_path.as_uri())
        ),
    ]
    reads: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if "job_write_places" in statement and statement.lstrip().startswith("SELECT"):
            reads.append(statement)

    engine = get_engine(settings.database_url)
    event.listen(engine, "before_cursor_execute", count)
    try:
        outcomes, _commits = _submit_specs_while_held(settings, specs)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert _name(outcomes[0]) == "before"
    assert _name(outcomes[2]) == "in-ours"
    for refused, loc in ((outcomes[1], ("output_path",)), (outcomes[3], ("checkpoint_s3_uri",))):
        assert isinstance(refused, SpecError), refused
        assert refused.loc == loc
        assert "a job of another project writes or wrote there" in str(refused)
    assert len(reads) == 2  # the first batch's, then the three that waited behind it
    with session_scope(settings.database_url) as session:
        stored = session.scalars(select(TrainingJob.name).order_by(TrainingJob.name)).all()
    assert stored == ["before", "in-ours"]


ADMIN = Principal(kind="user", name="admin", project="default", role=Role.ADMIN)
VIEWER = Principal(kind="user", name="viewer", project="default", role=Role.VIEWER)


def _reply(job: TrainingJob) -> str:
    return f"{job.name} {job.status} {job.secondary_status}"


@contextmanager
def _stopping_held(settings: Settings, name: str) -> Iterator[None]:
    """Hold back a stop of job ``name``: on PostgreSQL by its row's lock, which a stop
    takes to read it, on SQLite by its write lock."""
    if settings.database_url.startswith("sqlite"):
        with _storing_held(settings):
            yield
        return
    holder = create_engine(settings.database_url, poolclass=NullPool)
    try:
        with Session(holder) as session, session.begin():
            session.execute(select(TrainingJob).where(TrainingJob.name == name).with_for_update())
            yield
    finally:
        holder.dispose()


def _stop_while_held(
    submissions: Submissions, settings: Settings, stops: list[tuple[str, Principal]]
) -> list[str | BaseException]:
    """Ask ``stops`` at once, the first while it cannot be stored: the first batch holds
    it, the rest wait behind and go together."""

    async def asked(index: int, name: str, user: Principal) -> str:
        # As a request would ask it: the request's id and its job in its task's context.
        observed.request_id.set(f"stop-{index}")
        observed.job_name.set(name)
        return await submissions.stop(name, user, None, _reply)

    async def stop_all() -> list[str | BaseException]:
        with _stopping_held(settings, stops[0][0]):
            first = asyncio.create_task(asked(0, *stops[0]))
            await asyncio.sleep(0)  # it is in line
            await _until(lambda: submissions.waiting == 0)
            rest = [
                asyncio.create_task(asked(index, name, user))
                for index, (name, user) in enumerate(stops[1:], start=1)
            ]
            await _until(lambda: submissions.waiting == len(rest))
        return await asyncio.gather(first, *rest, return_exceptions=True)

    return asyncio.run(stop_all())


def _submitted(settings: Settings, source_dir: Path, names: list[str]) -> Submissions:
    submissions = Submissions(settings)

    async def submit_all() -> None:
        await asyncio.gather(
            *(submissions.submit(_spec(source_dir, name), "default") for name in names)
        )

    asyncio.run(submit_all())
    return submissions


def test_stops_asked_together_are_stored_in_one_transaction_each_with_its_answer(
    settings: Settings, source_dir: Path
) -> None:
    # No worker launches them: each waits to launch, and a stop ends it at once. One stop
    # is not the caller's to make, one names no job, one a job that has ended, one a job
    # stopped twice in the same batch.
    submissions = _submitted(settings, source_dir, ["first", "a", "b", "c", "ended"])
    asyncio.run(submissions.stop("ended", ADMIN, None, _reply))
    stops = [
        ("first", ADMIN),
        ("a", ADMIN),
        ("b", VIEWER),
        ("missing", ADMIN),
        ("ended", ADMIN),
        ("c", ADMIN),
        ("c", ADMIN),
    ]
    with _counting_commits(settings) as commits:
        outcomes = _stop_while_held(submissions, settings, stops)
    assert len(commits) == 2  # the first alone, then the rest together
    assert outcomes[:3] == ["first Stopped Stopped", "a Stopped Stopped", outcomes[2]]
    assert isinstance(outcomes[2], Forbidden)
    assert isinstance(outcomes[3], NotFound)
    assert "'missing'" in str(outcomes[3])
    assert isinstance(outcomes[4], Conflict)
    assert "already ended" in str(outcomes[4])
    assert outcomes[5] == "c Stopped Stopped"
    assert isinstance(outcomes[6], Conflict)  # the batch's first stop of it ended it
    with session_scope(settings.database_url) as session:
        statuses = {
            job.name: (job.status, [t.secondary_status for t in job.transitions])
            for job in session.scalars(select(TrainingJob))
        }
        lines = stored_line_count(session)
    status, transitions = statuses["a"]
    assert (status, transitions[-2:]) == ("Stopped", ["Stopping", "Stopped"])
    assert statuses["b"][0] == "InProgress"  # the viewer's stop changed nothing
    # A line in the log of each job stopped: "ended", "first", "a" and "c".
    assert lines == 4


def test_a_batch_of_stops_that_fails_is_stopped_again_one_by_one(
    settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submissions = _submitted(settings, source_dir, ["first", "a", "b"])
    real_stop_many = service.stop_many
    batches: list[int] = []

    def failing_once(session: Session, *args: Any) -> Any:
        batches.append(len(args[1]))
        stopped = real_stop_many(session, *args)
        if len(batches) == 1:
            raise OperationalError("UPDATE", {}, Exception("the database went away"))
        return stopped

    monkeypatch.setattr(service, "stop_many", failing_once)
    outcomes = _stop_while_held(
        submissions, settings, [("first", ADMIN), ("a", ADMIN), ("b", ADMIN), ("nope", ADMIN)]
    )
    assert batches == [3]  # the batch behind the first; then each alone
    assert outcomes[:3] == [
        "first Stopped Stopped",
        "a Stopped Stopped",
        "b Stopped Stopped",
    ]
    assert isinstance(outcomes[3], NotFound)
    with session_scope(settings.database_url) as session:
        transitions = [t.secondary_status for t in named(session, "a").transitions]
    # Stopped once: the failed batch's changes went with it.
    assert transitions[-2:] == ["Stopping", "Stopped"]
    assert transitions.count("Stopping") == 1


def test_each_stop_of_a_batch_is_logged_naming_its_own_request_and_job(
    settings: Settings, source_dir: Path
) -> None:
    # The operators' line of each stop, written by the submitting thread, names what the
    # request's own thread would have named: its request id and its job.
    submissions = _submitted(settings, source_dir, ["first", "a", "b"])
    lines: list[dict[str, Any]] = []
    handler = logging.Handler(logging.INFO)
    handler.setFormatter(JsonFormatter())
    handler.emit = lambda record: lines.append(json.loads(handler.format(record)))  # type: ignore[method-assign]
    logger = logging.getLogger(service.__name__)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        outcomes = _stop_while_held(
            submissions, settings, [("first", ADMIN), ("a", ADMIN), ("b", VIEWER)]
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert outcomes[:2] == ["first Stopped Stopped", "a Stopped Stopped"]
    assert isinstance(outcomes[2], Forbidden)
    stopped = [line for line in lines if line["message"] == "stop requested by admin"]
    assert [(line["request_id"], line["job"]) for line in stopped] == [
        ("stop-0", "first"),
        ("stop-1", "a"),
    ]
