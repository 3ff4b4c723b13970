"""Data access for jobs. Functions flush at most; the caller owns the transaction."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    JSON,
    Column,
    ColumnDefault,
    ColumnElement,
    Insert,
    Result,
    Row,
    Table,
    case,
    insert,
    literal,
    not_,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.orm import Session, joinedload, selectinload
from sqlalchemy.orm.attributes import set_committed_value

from service.jobs import listing
from service.jobs.listing import DEFAULT_SORT, JobFilters
from service.jobs.models import (
    IN_LINE,
    LINE_ORDER,
    JobInstance,
    JobLease,
    JobTransition,
    JobWritePlace,
    TrainingJob,
    record_field,
)
from service.jobs.states import LIVE, TERMINAL, Stage
from service.kit import scan
from service.kit.db import Base, UTCDateTime, read_pages_in_index_order, utcnow


def get(
    session: Session,
    name: str,
    project: str,
    *,
    with_details: bool = False,
    to_change: bool = False,
    with_instances: bool = True,
) -> TrainingJob | None:
    """The job of that name in ``project`` (names are unique within a project).
    ``to_change``: locked until the transaction ends (on PostgreSQL; SQLite's writer holds
    the whole database), so the reconciler cannot change it between this read and the
    caller's write. ``with_instances`` False: the details without the instances, which
    are read when first looked at (a caller that knows there are none says so with
    ``has_no_instances``)."""
    return _one(
        session,
        TrainingJob.project == project,
        TrainingJob.name == name,
        details=with_details,
        locked=to_change,
        instances=with_instances,
    )


def get_many_to_change(
    session: Session, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], TrainingJob]:
    """The jobs of these (project, name) keys that exist, by key, each with its
    transitions, locked as ``get`` locks one: read in one statement, locked in the order
    of their ids, as every batch locks them, so that two batches never wait on each other."""
    if not keys:
        return {}
    query = (
        select(TrainingJob)
        .where(tuple_(TrainingJob.project, TrainingJob.name).in_(keys))
        .order_by(TrainingJob.id)
        .with_for_update(of=TrainingJob)
        .options(joinedload(TrainingJob.transitions))
    )
    jobs = session.execute(query).unique().scalars()
    return {(job.project, job.name): job for job in jobs}


def has_no_instances(job: TrainingJob) -> None:
    """Record, without reading, that ``job`` has no instances and no final metrics: for
    a job that never launched, which neither can have."""
    set_committed_value(job, "instances", [])
    set_committed_value(job, "final_metrics", [])


def insert_new(
    session: Session, jobs: list[TrainingJob], written: dict[str, tuple[str, ...]] | None = None
) -> None:
    """Store jobs made just now (not added to the session), with their transitions,
    leases and the places each writes (``written``: keys by job id): one INSERT per table
    for them all. Through Core: the ORM's flush of the same
    objects (its unit of work, and the transitions' ids read back, which no reply shows)
    cost a quarter of what a create cost the API. The objects stay outside the session,
    holding what was stored, as a flush leaves them: ready for the reply."""
    _insert(session, TrainingJob, [_new_row(job) for job in jobs])
    _insert(
        session,
        JobTransition,
        [_new_row(step, job_id=job.id) for job in jobs for step in job.transitions],
    )
    _insert(session, JobLease, [_new_row(job.lease, job_id=job.id) for job in jobs])
    places = [
        {"job_id": job.id, "project": job.project, "key": key}
        for job in jobs
        for key in (written or {}).get(job.id, ())
    ]
    if places:
        session.execute(_insert_into(_table(JobWritePlace)), places)


def _insert(session: Session, model: type[Base], rows: list[dict[str, Any]]) -> None:
    """One INSERT of ``rows`` (each naming every column), the columns that are NULL in
    every row and would be NULL by default left out: a new job's row is half empty, and
    the driver converts each value sent, in Python, row by row. (A JSON column's None is
    sent: it is stored as JSON's null, not as SQL's.)"""
    table = _table(model)
    empty = {
        column.key
        for column in table.columns
        if column.server_default is None
        and not isinstance(column.type, JSON)
        and all(row.get(column.key) is None for row in rows)
    }
    sent = [{key: value for key, value in row.items() if key not in empty} for row in rows]
    session.execute(_insert_into(table), sent)


@functools.cache
def _insert_into(table: Table) -> Insert:
    """A table's INSERT, made once: SQLAlchemy keeps a statement's cache key with it, and
    working it out again for each batch's four cost a tenth of storing them."""
    return insert(table)


def _new_row(row: Base, **values: Any) -> dict[str, Any]:
    """Every column of a new row (rows inserted together must name the same columns): what
    ``values`` or the object holds, else the column's default; the object is given the
    same. An empty key is left for the database to generate."""
    # Read from the object's own dict, and given back as committed: through the mapped
    # attributes, each read and set fired the ORM's events, a third of a store's time.
    # An attribute never set is not in the dict (and reads as None).
    held_now = row.__dict__
    for column in _table(type(row)).columns:
        held = held_now.get(column.key)
        value = values.get(column.key, held)
        if value is None and column.default is not None:
            value = _default(column)
        if value is None and column.primary_key:
            values.pop(column.key, None)
            continue
        if value is not held:
            set_committed_value(row, column.key, value)
        values[column.key] = value
    return values


def _table(model: type[Base]) -> Table:
    return cast(Table, model.__table__)  # declared, so a Table (typed as any FROM clause)


def _default(column: Column[Any]) -> Any:
    default = column.default
    if isinstance(default, ColumnDefault) and default.is_callable:
        # SQLAlchemy wraps it to take the execution context, which none of ours reads.
        return default.arg(None)
    if isinstance(default, ColumnDefault) and default.is_scalar:
        return default.arg
    raise TypeError(f"{column}: its default is known only to the database")


def get_by_id(session: Session, job_id: str) -> TrainingJob | None:
    return _one(session, TrainingJob.id == job_id, details=False)


def get_to_change(session: Session, job_id: str) -> TrainingJob | None:
    """The job with its transitions, which nearly every change of state adds to; its
    instances are read only by a change that looks at them."""
    query = select(TrainingJob).where(TrainingJob.id == job_id)
    return session.scalar(query.options(selectinload(TrainingJob.transitions)))


def _one(
    session: Session, *where: Any, details: bool, locked: bool = False, instances: bool = True
) -> TrainingJob | None:
    query = select(TrainingJob).where(*where)
    if locked:
        query = query.with_for_update(of=TrainingJob)
    if not details:
        return session.scalar(query)
    # The transitions (a few rows) joined to the job's row: one round trip, not a second
    # SELECT; the instances (up to thousands) in one of their own.
    query = query.options(joinedload(TrainingJob.transitions))
    if instances:
        query = query.options(selectinload(TrainingJob.instances))
    return session.execute(query).unique().scalar_one_or_none()


def name_taken(session: Session, name: str, project: str) -> bool:
    query = select(TrainingJob.id).where(TrainingJob.project == project, TrainingJob.name == name)
    return session.scalar(query) is not None


# What a page of jobs shows of each (``service.jobs.schemas.JobSummary``), as columns: the
# instance type and count are read out of the record's JSON by the database, so that a page
# never loads records (their hyperparameters and environment take up to some hundred KiB).
SUMMARY_COLUMNS = (
    TrainingJob.id,
    TrainingJob.name,
    TrainingJob.project,
    TrainingJob.status,
    TrainingJob.secondary_status,
    TrainingJob.created_at,
    TrainingJob.ended_at,
    record_field("instance_type").as_string().label("instance_type"),
    record_field("instance_count").as_integer().label("instance_count"),
)


def page(
    session: Session,
    filters: JobFilters,
    *,
    limit: int,
    cursor: str | None,
    sort: str = DEFAULT_SORT,
) -> tuple[list[Row[Any]], str | None]:
    """A page of the jobs ``filters`` match, as rows of ``SUMMARY_COLUMNS``, in ``sort``'s
    order (newest first unless told); the cursor names where the previous page ended.
    ``filters.project`` None: every project's. Filters that ``sort``'s index leaves to
    test row by row are tested on a window of jobs (``service.kit.scan``): the page may
    then hold fewer than ``limit`` jobs, and still a cursor."""
    dialect = session.get_bind().dialect.name
    read_pages_in_index_order(session)

    def in_order(query: scan.Query) -> scan.Query:
        return listing.ordered_after(listing.sought(query, filters, sort), sort, cursor)

    if not listing.tests_rows(filters, sort):
        rows = session.execute(in_order(select(*SUMMARY_COLUMNS)).limit(limit + 1)).all()
        if len(rows) <= limit:
            return list(rows), None
        return list(rows[:limit]), listing.encode(rows[limit - 1], sort)
    window = in_order(select(TrainingJob.id, TrainingJob.name, TrainingJob.created_at))
    found, last = scan.page_of_window(
        session,
        window,
        lambda ids: listing.tested(
            select(*SUMMARY_COLUMNS).where(TrainingJob.id.in_(ids)), filters, sort, dialect
        ),
        limit=limit,
    )
    return found, None if last is None else listing.encode(last, sort)


def status_of(session: Session, job_id: str) -> str | None:
    return session.scalar(select(TrainingJob.status).where(TrainingJob.id == job_id))


def _live() -> ColumnElement[bool]:
    return TrainingJob.status.in_(sorted(LIVE))


def sweep_job_ids(
    session: Session, *, running_every: float, waiting_every: float, heads: int, batch: int
) -> list[str]:
    """What beat's safety sweep re-drives now.

    - Every job with a clock running outside its instances: launching, stopping (the
      scripts' grace), restarting (the back-off).
    - Jobs whose instances run, each every ``running_every`` seconds: their instances'
      reports wake them as things happen; this finds an instance that died unheard.
    - Of the jobs waiting for capacity, each every ``waiting_every`` seconds, the
      ``heads`` nearest the front of the line (the next to be admitted, should the
      message that woke them have been lost) and a batch of the spot jobs (their max_wait
      runs while they wait). A job deep in line can only move once those ahead have.

    So a sweep's cost is bounded by what can change, whatever the number of live jobs."""
    now = utcnow()
    urgent = list(
        session.scalars(select(TrainingJob.id).where(_live(), not_(IN_LINE), not_(_running())))
    )
    leased = select(TrainingJob.id).join(JobLease, JobLease.job_id == TrainingJob.id)
    running = session.scalars(
        leased.where(_running(), _not_swept_since(now - timedelta(seconds=running_every)))
    )
    stale = _not_swept_since(now - timedelta(seconds=waiting_every))
    front = select(TrainingJob.id).where(IN_LINE).order_by(*LINE_ORDER).limit(heads)
    first = session.scalars(leased.where(TrainingJob.id.in_(front.scalar_subquery()), stale))
    spot = record_field("use_spot_instances").as_boolean().is_(True)
    timed = session.scalars(
        leased.where(IN_LINE, stale, spot)
        .order_by(JobLease.swept_at.is_not(None), JobLease.swept_at, TrainingJob.created_at)
        .limit(batch)
    )
    swept = list(dict.fromkeys([*running, *first, *timed]))
    if swept:
        session.execute(update(JobLease).where(JobLease.job_id.in_(swept)).values(swept_at=now))
    return urgent + swept


def _not_swept_since(moment: datetime) -> ColumnElement[bool]:
    return or_(JobLease.swept_at.is_(None), JobLease.swept_at < moment)


def _running() -> ColumnElement[bool]:
    """A live job whose instances were launched and are not being stopped or restarted."""
    return TrainingJob.stage == Stage.RUNNING


def first_in_line(session: Session, count: int) -> list[str]:
    """The jobs waiting for capacity that would be admitted first (by priority, then age),
    to wake when capacity frees."""
    query = select(TrainingJob.id).where(IN_LINE).order_by(*LINE_ORDER).limit(count)
    return list(session.scalars(query))


def holds_capacity(session: Session, job_id: str) -> bool:
    """Whether the job has been admitted and has not ended (its instances count)."""
    query = select(TrainingJob.id).where(
        TrainingJob.id == job_id, _live(), TrainingJob.admitted_at.is_not(None)
    )
    return session.scalar(query) is not None


def ended_job_ids(session: Session, ids: list[str]) -> set[str]:
    """Which of ``ids`` are jobs of this server that have ended, and that no reconciler is
    at work on (the pass that ended a job removes its instances right after)."""
    terminal = [str(status) for status in TERMINAL]
    unleased = or_(JobLease.until.is_(None), JobLease.until < utcnow())
    query = (
        select(TrainingJob.id)
        .outerjoin(JobLease, JobLease.job_id == TrainingJob.id)
        .where(TrainingJob.id.in_(ids), TrainingJob.status.in_(terminal), unleased)
    )
    return set(session.scalars(query))


def instance(session: Session, job_id: str, host: str) -> JobInstance | None:
    return session.scalar(
        select(JobInstance).where(JobInstance.job_id == job_id, JobInstance.host == host)
    )


def instances(session: Session, job_id: str) -> list[JobInstance]:
    return list(session.scalars(select(JobInstance).where(JobInstance.job_id == job_id)))


# Leases: at most one reconciler works on a job at a time, and a request that arrives while
# one is working is not lost: it sets ``requested``, which the holder checks before letting
# go. Plain conditional UPDATEs, so this works the same on SQLite and PostgreSQL.


def take_lease(session: Session, job_id: str, owner: str, ttl: float) -> bool:
    """Take the job's lease for a first pass if nobody holds it; else ask the holder for
    another pass. True when taken.

    One statement, so the row's lock orders it against the holder's ``release_lease``:
    either the holder let go first and this takes the lease, or this asked first and the
    holder, seeing the request, does not let go."""
    now = utcnow()
    free = or_(JobLease.until.is_(None), JobLease.until < now)
    taken = session.scalar(
        update(JobLease)
        .where(JobLease.job_id == job_id)
        .values(
            owner=case((free, owner), else_=JobLease.owner),
            until=case(
                (free, literal(now + timedelta(seconds=ttl), UTCDateTime())),
                else_=JobLease.until,
            ),
            # The pass about to run answers any request made before it.
            requested=not_(free),
        )
        .returning(JobLease.owner)
    )
    return taken == owner


def start_pass(session: Session, job_id: str, owner: str, ttl: float) -> bool:
    """Renew the lease and consume pending requests; False if the lease was lost."""
    result = session.execute(
        update(JobLease)
        .where(JobLease.job_id == job_id, JobLease.owner == owner)
        .values(requested=False, until=utcnow() + timedelta(seconds=ttl))
    )
    return _changed(result)


def release_lease(session: Session, job_id: str, owner: str) -> bool:
    """Let go unless someone asked for another pass meanwhile; True when released."""
    result = session.execute(
        update(JobLease)
        .where(
            JobLease.job_id == job_id,
            JobLease.owner == owner,
            JobLease.requested.is_(False),
        )
        .values(owner=None, until=None)
    )
    if _changed(result):
        return True
    still_ours = session.scalar(
        select(JobLease.job_id).where(JobLease.job_id == job_id, JobLease.owner == owner)
    )
    return still_ours is None


def drop_lease(session: Session, job_id: str, owner: str) -> None:
    """Let go whatever is pending: the holder is giving up (an error, or done)."""
    session.execute(
        update(JobLease)
        .where(JobLease.job_id == job_id, JobLease.owner == owner)
        .values(owner=None, until=None)
    )


def _changed(result: Result[Any]) -> bool:
    return bool(getattr(result, "rowcount", 0))
