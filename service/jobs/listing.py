"""What a page of jobs may be filtered and ordered by: a name's prefix or a part of it, a
creation window, tags, and one of a few orders, each read as a keyset page."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, get_args

from sqlalchemy import ColumnElement, and_, cast, exists, func, or_, select
from sqlalchemy.dialects.postgresql import JSONB

from service.jobs.models import TrainingJob, record_field
from service.kit.errors import SpecError
from service.kit.scan import Query
from service.kit.text import unstorable

# The orders a list can take: newest first (the default), oldest first, by name.
JobSort = Literal["-created_at", "created_at", "name", "-name"]
SORTS: tuple[str, ...] = get_args(JobSort)
DEFAULT_SORT: JobSort = "-created_at"
# A tag filter is "key" (any value) or "key=value"; a job must have every one asked for.
MAX_TAG_FILTERS = 5


class Listed(Protocol):
    """What a cursor is made of: the job a page ends at, or a row of these columns."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...


@dataclass(frozen=True)
class TagFilter:
    key: str
    value: str | None = None

    @classmethod
    def parse(cls, text: str, index: int) -> TagFilter:
        key, equals, value = text.partition("=")
        if not key:
            raise SpecError(("tag", index), "a tag filter is key or key=value", source="query")
        return cls(key, value if equals else None)


@dataclass(frozen=True)
class JobFilters:
    project: str | None = None
    status: str | None = None
    name_prefix: str | None = None
    name_contains: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    tags: tuple[TagFilter, ...] = field(default_factory=tuple)


def _literal(text: str) -> str:
    """``text`` for a LIKE pattern, its wildcards plain characters."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def by_name(sort: str) -> bool:
    return sort.endswith("name")


def sought(query: Query, filters: JobFilters, sort: str) -> Query:
    """``query`` with the filters that the index of ``sort``'s order answers: a range of
    it, which the database goes straight to. By creation time, the project's (or the
    status's) index of jobs by time; by name, the project's names."""
    if filters.project is not None:
        query = query.where(TrainingJob.project == filters.project)
    if by_name(sort):
        if filters.name_prefix:
            pattern = f"{_literal(filters.name_prefix)}%"
            query = query.where(TrainingJob.name.like(pattern, escape="\\"))
        return query
    if filters.status:
        query = query.where(TrainingJob.status == filters.status)
    return _created_within(query, filters)


def tested(query: Query, filters: JobFilters, sort: str, dialect: str) -> Query:
    """``query`` with the filters tested row by row in ``sort``'s order (``sought`` has
    the others)."""
    if by_name(sort):
        if filters.status:
            query = query.where(TrainingJob.status == filters.status)
        query = _created_within(query, filters)
    elif filters.name_prefix:
        query = query.where(TrainingJob.name.like(f"{_literal(filters.name_prefix)}%", escape="\\"))
    if filters.name_contains:
        pattern = f"%{_literal(filters.name_contains)}%"
        query = query.where(TrainingJob.name.ilike(pattern, escape="\\"))
    for tag in filters.tags:
        query = query.where(_has_tag(tag, dialect))
    return query


def tests_rows(filters: JobFilters, sort: str) -> bool:
    """Whether ``sort``'s index leaves some of ``filters`` to test row by row."""
    if filters.name_contains or filters.tags:
        return True
    if by_name(sort):
        return bool(filters.status or filters.created_after or filters.created_before)
    return bool(filters.name_prefix)


def _created_within(query: Query, filters: JobFilters) -> Query:
    if filters.created_after is not None:
        query = query.where(TrainingJob.created_at >= filters.created_after)
    if filters.created_before is not None:
        query = query.where(TrainingJob.created_at < filters.created_before)
    return query


def _has_tag(tag: TagFilter, dialect: str) -> ColumnElement[bool]:
    # Tags live in the record's JSON (a list of {key, value}), where each database has its
    # own way into a list: PostgreSQL's containment, SQLite's json_each.
    if dialect == "postgresql":
        wanted: dict[str, str] = {"key": tag.key}
        if tag.value is not None:
            wanted["value"] = tag.value
        return cast(record_field("tags"), JSONB).contains([wanted])
    each = func.json_each(TrainingJob.spec, "$.tags").table_valued("value").alias("tag")
    match = func.json_extract(each.c.value, "$.key") == tag.key
    if tag.value is not None:
        match = and_(match, func.json_extract(each.c.value, "$.value") == tag.value)
    return exists(select(1).select_from(each).where(match))


def _columns(sort: str) -> tuple[Any, Any]:
    key = TrainingJob.name if by_name(sort) else TrainingJob.created_at
    return key, TrainingJob.id


def ordered_after(query: Query, sort: str, cursor: str | None) -> Query:
    """The query in ``sort``'s order, from after the row ``cursor`` names."""
    key, row_id = _columns(sort)
    descending = sort.startswith("-")
    if cursor:
        last_key, last_id = decode(cursor, sort)
        if descending:
            query = query.where(or_(key < last_key, and_(key == last_key, row_id < last_id)))
        else:
            query = query.where(or_(key > last_key, and_(key == last_key, row_id > last_id)))
    if descending:
        return query.order_by(key.desc(), row_id.desc())
    return query.order_by(key, row_id)


def encode(job: Listed, sort: str) -> str:
    """The cursor of a page that ends at ``job`` (a job, or a row of its columns)."""
    key = job.name if by_name(sort) else job.created_at.isoformat()
    raw = json.dumps([sort, key, job.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str, sort: str) -> tuple[Any, str]:
    """The key and id a cursor holds; one issued for another order is refused."""
    problem = "not a cursor this server issued"
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        issued_for, key, row_id = json.loads(raw)
        if not all(isinstance(part, str) for part in (issued_for, key, row_id)):
            raise TypeError(cursor)
        if unstorable(key) or unstorable(row_id):
            raise ValueError(cursor)
        if issued_for != sort:
            if issued_for in SORTS:
                problem = f"a cursor of the {issued_for!r} order, not of {sort!r}"
            raise ValueError(cursor)
        if sort.endswith("created_at"):
            key = datetime.fromisoformat(key)
            if key.tzinfo is None:
                raise ValueError(cursor)
    except (ValueError, TypeError) as exc:
        raise SpecError(("cursor",), problem, source="query") from exc
    return key, row_id
