"""Capacity: which job may take instances now, and which must wait in line.

Instances of a type are finite (``RUNYARD_CAPACITY``) and so is what each project may hold
(``RUNYARD_TENANT_QUOTAS``, per type and in all under ``"*"``). A job holds its instances
from admission until it ends or a spot interruption hands them back; all of a job's
instances are admitted together, never some of them, so two half-admitted jobs can never
wait on each other.

Waiting jobs of a type form one line, by priority (higher first) and then by age. A job
may not pass one ahead of it that waits for the type's capacity (else large jobs would
starve behind a stream of small ones), but it may pass one that only waits for its own
project's quota, and belongs to another project: one project's limit must not hold up the
others, but its own small jobs must not starve its large one either.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Row, Select, and_, func, not_, or_, select
from sqlalchemy.orm import Session

from service.jobs.models import HELD, IN_LINE, LINE_ORDER, TrainingJob, record_field
from service.jobs.states import LIVE, Status
from service.settings import Settings

ALL_TYPES = "*"
# Any fixed number: the advisory lock that makes admission one decision at a time on
# PostgreSQL (SQLite already serializes every write transaction).
_ADMISSION_LOCK = 0x52554E59
# Orders forecasts of new jobs before the wake that follows freed capacity (``forecast``).
_FORECAST_LOCK = 0x52554E5A
# Waiting jobs read at a time, in the order of the line.
_LINE_PAGE = 16
# What a job asks for or holds (a _Claim): of its spec, only the two fields that count.
# Every batch of creates reads the claims of the jobs holding instances, and a whole spec
# read and parsed for each (50 running jobs) cost a batch 1.5 ms of CPU.
_CLAIM_COLUMNS = (
    TrainingJob.id,
    TrainingJob.name,
    TrainingJob.project,
    record_field("instance_type").as_string().label("instance_type"),
    record_field("instance_count").as_integer().label("instance_count"),
    TrainingJob.priority,
    TrainingJob.created_at,
    TrainingJob.admitted_at,
    TrainingJob.status,
)


@dataclass(frozen=True)
class Admission:
    admitted: bool
    # Why the job waits, for people; empty when admitted.
    reason: str = ""


@dataclass(frozen=True)
class _Claim:
    """What one live job asks for or holds."""

    job_id: str
    name: str
    project: str
    instance_type: str
    count: int
    priority: int
    created_at: datetime
    admitted: bool


def never_fits(settings: Settings, instance_type: str, count: int, project: str) -> str | None:
    """Why a job of ``count`` instances could never start here, or None if it could."""
    capacity = settings.capacity.get(instance_type)
    if capacity is not None and count > capacity:
        return f"{count} {instance_type} instances asked for; this server has {capacity}"
    for scope, limit in _quotas(settings, project, instance_type):
        if count > limit:
            what = "instances" if scope == ALL_TYPES else f"{instance_type} instances"
            return f"{count} {what} asked for; project {project!r} may hold {limit}"
    return None


def _limited(settings: Settings, job: TrainingJob) -> bool:
    """Whether anything bounds the job at all (if not, it is admitted at once)."""
    instance_type = job.record.instance_type
    return instance_type in settings.capacity or bool(_quotas(settings, job.project, instance_type))


def fits_now(
    session: Session, settings: Settings, instance_type: str, count: int, project: str
) -> str | None:
    """Why a new job would have to wait now (for ``on_capacity_exceeded=refuse``), or None.

    Every live job counts, admitted or not: one accepted a moment ago but not reconciled
    yet will take its instances before this one could. Runs inside the submitting
    transaction, under the admission lock, so two submissions cannot both take the last
    instances."""
    _lock_admission(session)
    usage = _Usage()
    for claim in _live_claims(session):
        usage.take(claim)
    waiting = _Claim("", "", project, instance_type, count, 0, datetime.max, admitted=False)
    return _blocker(settings, usage, waiting)


def decide(session: Session, settings: Settings, job: TrainingJob) -> Admission:
    """Admit ``job`` if its turn has come and its instances are free; else say why not.
    Runs inside the caller's write transaction, which then records the admission. The
    worker's one question; ``forecast`` asks the same of jobs being submitted."""
    if not _limited(settings, job):
        return Admission(True)
    _lock_admission(session)
    return _verdict(session, settings, job)


def forecast(session: Session, settings: Settings, jobs: list[TrainingJob]) -> list[Admission]:
    """For jobs about to be stored, in the transaction that stores them: whether each will
    have to wait in line, and why. Only ``decide`` admits; a job this finds waiting is
    stored waiting and left for what frees capacity to wake (``wake_after_forecasts``), so
    thousands of queued jobs cost the worker nothing until their turn nears. Jobs stored
    together are judged as if each were submitted alone, at the same moment.

    Submissions do not wait for each other here (the lock is shared), but what wakes the
    line after capacity frees waits for every forecast in flight to commit: a job found
    waiting by a forecast that read just before the capacity freed is then in the line it
    reads."""
    bounded = [job for job in jobs if _limited(settings, job)]
    if not bounded:
        return [Admission(True) for _ in jobs]
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_SHARE_FORECAST_LOCK)
    held = _held_claims(session)
    verdicts = {
        job.id: _verdict(session, settings, job, new=_claim_of(job), held=held) for job in bounded
    }
    return [verdicts.get(job.id, Admission(True)) for job in jobs]


def wake_after_forecasts(session: Session) -> None:
    """Before reading the line to wake it after capacity freed: wait for the forecasts in
    flight (see ``forecast``). SQLite needs nothing: a submission holds the write lock from
    its first statement, so no capacity frees while it forecasts."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(_FORECAST_LOCK)))


def _verdict(
    session: Session,
    settings: Settings,
    job: TrainingJob,
    new: _Claim | None = None,
    held: list[_Claim] | None = None,
) -> Admission:
    """``new``: the claim of a job not stored yet (which is then not read back); ``held``:
    the claims of the admitted jobs, when already read in this transaction."""
    # First what is held, a few rows: a job that would not fit even first in line waits,
    # and the line (every waiting job, thousands under load) need not be read at all.
    if held is None:
        held = _held_claims(session)
    own = [new] if new is not None else _live_claims(session, TrainingJob.id == job.id)
    if not own:
        return Admission(False, "the job has ended")
    mine = own[0]
    if mine.admitted:
        return Admission(False, "the job is not waiting")
    usage = _usage(held)
    if blocker := _blocker(settings, usage, mine):
        return Admission(False, blocker)
    # Then the jobs ahead of it in its type's line, in its order, few for a job woken near
    # the front: what they will take comes first. The first one that waits for the
    # type's capacity decides, so a new job behind thousands reads a page of them.
    for ahead in itertools.chain(_line_ahead_of(session, mine), [mine]):
        blocker = _blocker(settings, usage, ahead)
        if ahead.job_id == mine.job_id:
            return Admission(False, blocker) if blocker else Admission(True)
        if blocker is None:
            # It will be admitted by its own pass: keep its instances for it.
            usage.take(ahead)
        elif _waits_for_capacity(settings, usage, ahead):
            return Admission(
                False,
                f"Waiting in line for {mine.instance_type} capacity behind {ahead.name} "
                f"({ahead.count} instances, priority {ahead.priority})",
            )
        elif ahead.project == mine.project:
            return Admission(
                False,
                f"Waiting in line for project {mine.project!r}'s quota behind {ahead.name} "
                f"({ahead.count} instances, priority {ahead.priority})",
            )
    return Admission(False, "the job is not waiting")  # unreachable: mine is in the line


@dataclass(frozen=True)
class Holding:
    """One live job of an instance type, as the capacity overview shows it."""

    name: str
    project: str
    count: int
    priority: int
    # Why it waits (its pending reason); None for a job that holds its instances.
    reason: str | None


@dataclass(frozen=True)
class TypeLine:
    instance_type: str
    capacity: int | None
    in_use: int
    running: list[Holding]
    # The front of the line, in its order: priority (higher first), then age.
    waiting: list[Holding]
    # All the jobs waiting in the type's line.
    waiting_count: int


@dataclass(frozen=True)
class Place:
    """A job's place in its type's line."""

    instance_type: str
    # 1 for the next job to start; None for a job not waiting in line.
    place: int | None
    waiting_count: int


def overview(session: Session, settings: Settings, waiting_shown: int) -> list[TypeLine]:
    """Per instance type with live jobs: what holds instances, and the first
    ``waiting_shown`` jobs of its line (a line may be thousands long)."""
    held = _held_claims(session)
    usage = _usage(held)
    # Grouped in a subquery: PostgreSQL would not match the path bound twice.
    in_line = select(_instance_type().label("kind")).where(IN_LINE).subquery()
    grouped = select(in_line.c.kind, func.count()).group_by(in_line.c.kind)
    counts: dict[str, int] = {row[0]: row[1] for row in session.execute(grouped)}
    lines = []
    for kind in sorted({claim.instance_type for claim in held} | counts.keys()):
        running = sorted(
            (claim for claim in held if claim.instance_type == kind), key=_place_in_line
        )
        front = session.execute(
            select(*_CLAIM_COLUMNS, TrainingJob.pending_reason)
            .where(IN_LINE, _instance_type() == kind)
            .order_by(*LINE_ORDER)
            .limit(waiting_shown)
        )
        lines.append(
            TypeLine(
                instance_type=kind,
                capacity=settings.capacity.get(kind),
                in_use=usage.by_type[kind],
                running=[_holding(claim, None) for claim in running],
                waiting=[
                    _holding(_claim_of_row(row), row.pending_reason or "Not decided yet")
                    for row in front
                ],
                waiting_count=counts.get(kind, 0),
            )
        )
    return lines


def place_in_line(session: Session, job: TrainingJob) -> Place:
    """Where ``job`` stands in its type's line: two counts, for a page that shows one job."""
    mine = _claim_of(job)
    of_type = select(func.count()).where(IN_LINE, _instance_type() == mine.instance_type)
    waiting = session.scalar(of_type) or 0
    # IN_LINE, of the row at hand.
    in_line = (
        job.status == Status.IN_PROGRESS and job.restart_cause is None and job.admitted_at is None
    )
    place = (session.scalar(of_type.where(_ahead_of(mine))) or 0) + 1 if in_line else None
    return Place(mine.instance_type, place, waiting)


def _instance_type() -> ColumnElement[str]:
    kind: ColumnElement[str] = record_field("instance_type").as_string()
    return kind


def _holding(claim: _Claim, reason: str | None) -> Holding:
    return Holding(claim.name, claim.project, claim.count, claim.priority, reason)


def _lock_admission(session: Session) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(_ADMISSION_LOCK)))


class _Usage:
    """Instances held, by type and by (project, type or "*")."""

    def __init__(self) -> None:
        self.by_type: Counter[str] = Counter()
        self.by_project: Counter[tuple[str, str]] = Counter()

    def take(self, claim: _Claim) -> None:
        self.by_type[claim.instance_type] += claim.count
        self.by_project[claim.project, claim.instance_type] += claim.count
        self.by_project[claim.project, ALL_TYPES] += claim.count


def _usage(claims: list[_Claim]) -> _Usage:
    usage = _Usage()
    for claim in claims:
        if claim.admitted:
            usage.take(claim)
    return usage


def _blocker(settings: Settings, usage: _Usage, claim: _Claim) -> str | None:
    """Why ``claim`` cannot be admitted with ``usage`` held, or None if it can."""
    kind = claim.instance_type
    capacity = settings.capacity.get(kind)
    if capacity is not None and usage.by_type[kind] + claim.count > capacity:
        return (
            f"Waiting for capacity: {usage.by_type[kind]} of {capacity} {kind} instances "
            f"are in use and the job needs {claim.count}"
        )
    for scope, limit in _quotas(settings, claim.project, kind):
        held = usage.by_project[claim.project, scope]
        if held + claim.count > limit:
            what = "instances" if scope == ALL_TYPES else f"{kind} instances"
            return (
                f"Waiting for project {claim.project!r}'s quota: its jobs hold {held} of "
                f"{limit} {what} and this one needs {claim.count}"
            )
    return None


def _waits_for_capacity(settings: Settings, usage: _Usage, claim: _Claim) -> bool:
    capacity = settings.capacity.get(claim.instance_type)
    return capacity is not None and usage.by_type[claim.instance_type] + claim.count > capacity


def _quotas(settings: Settings, project: str, instance_type: str) -> list[tuple[str, int]]:
    quotas = settings.quotas_of(project)
    return [(scope, quotas[scope]) for scope in (instance_type, ALL_TYPES) if scope in quotas]


def _claim_of(job: TrainingJob) -> _Claim:
    """The claim of a job at hand, stored or about to be."""
    record = job.record
    return _claim(job, record.instance_type, record.instance_count)


def _claim_of_row(row: Row[Any]) -> _Claim:
    """The claim of a row of ``_CLAIM_COLUMNS``."""
    return _claim(row, row.instance_type, row.instance_count)


def _claim(job: TrainingJob | Row[Any], instance_type: str, count: int) -> _Claim:
    return _Claim(
        job_id=job.id,
        name=job.name,
        project=job.project,
        instance_type=instance_type,
        count=count,
        priority=job.priority,
        created_at=job.created_at,
        # A job being stopped before it was admitted never takes instances.
        admitted=job.admitted_at is not None,
    )


def _line_ahead_of(session: Session, mine: _Claim) -> Iterator[_Claim]:
    """The waiting jobs of ``mine``'s type ahead of it, in the order of the line (priority,
    higher first, then age), a page at a time."""
    after: _Claim | None = None
    while True:
        query = _live_claims_query(
            TrainingJob.admitted_at.is_(None),
            _instance_type() == mine.instance_type,
            _ahead_of(mine),
            *([] if after is None else [not_(_ahead_of(after)), TrainingJob.id != after.job_id]),
        )
        rows = session.execute(query.order_by(*LINE_ORDER).limit(_LINE_PAGE)).all()
        for row in rows:
            after = _claim_of_row(row)
            if row.status == Status.IN_PROGRESS:
                yield after
        if len(rows) < _LINE_PAGE:
            return


def _ahead_of(claim: _Claim) -> ColumnElement[bool]:
    """Jobs before ``claim`` in the line: of higher priority, or as high and older."""
    return or_(
        TrainingJob.priority > claim.priority,
        and_(
            TrainingJob.priority == claim.priority,
            or_(
                TrainingJob.created_at < claim.created_at,
                and_(TrainingJob.created_at == claim.created_at, TrainingJob.id < claim.job_id),
            ),
        ),
    )


def _live_claims(session: Session, *where: ColumnElement[bool]) -> list[_Claim]:
    return _claims(session, _live_claims_query(*where))


def _held_claims(session: Session) -> list[_Claim]:
    """The claims of the jobs holding instances."""
    return _claims(session, _HELD_CLAIMS)


def _claims(session: Session, query: Select[Any]) -> list[_Claim]:
    return [
        _claim_of_row(row)
        for row in session.execute(query)
        if row.admitted_at is not None or row.status == Status.IN_PROGRESS
    ]


def _live_claims_query(*where: ColumnElement[bool]) -> Select[Any]:
    return select(*_CLAIM_COLUMNS).where(TrainingJob.status.in_(sorted(LIVE)), *where)


# Statements every batch of submissions runs, built once: SQLAlchemy keeps a statement's
# cache key with it, which took 60 us to work out again for these two each time.
_HELD_CLAIMS = _live_claims_query(HELD)
_SHARE_FORECAST_LOCK = select(func.pg_advisory_xact_lock_shared(_FORECAST_LOCK))


def _place_in_line(claim: _Claim) -> tuple[int, datetime, str]:
    # As LINE_ORDER: higher priority first, then the older.
    return (-claim.priority, claim.created_at, claim.job_id)
