"""Granting a project places beyond its area, and reading what a project may use.

Only a server administrator grants (the routes see to it). A grant is refused where it
would let two projects' jobs write to one place: a read-write grant shares nothing with
another project's read-write grant, nor with a place where another project's job writes
or wrote (``JobWritePlace``), nor with the artifact root, where every project has its own
area; and no grant holds the whole artifact root or the server's own files.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sqlalchemy import ColumnElement, TextClause, and_, or_, select, text
from sqlalchemy.orm import InstrumentedAttribute, Session

from service.auth.models import DEFAULT_PROJECT
from service.auth.service import require_project
from service.grants.models import ProjectGrant
from service.grants.places import (
    READ_WRITE,
    Access,
    Place,
    ProjectPlaces,
    ancestors,
    covers,
    keys,
    overlap,
    places_of,
)
from service.jobs import file_roots
from service.jobs.models import JobWritePlace
from service.kit import access_cache
from service.kit.errors import Conflict, NotFound, SpecError
from service.settings import Settings

# The PostgreSQL advisory lock that changing a grant holds: two read-write grants made at
# once to two projects are checked against each other. SQLite lets one writer in at a time.
GRANTS_LOCK = int.from_bytes(b"GRANTS")


@dataclass(frozen=True)
class DataAccess:
    """What a project's jobs may use, and the other projects' read-write grants, where
    none of its jobs may write."""

    places: ProjectPlaces
    others_writable: tuple[Place, ...]


def grants(session: Session, project: str) -> list[ProjectGrant]:
    return list(
        session.scalars(
            select(ProjectGrant)
            .where(ProjectGrant.project == project)
            .order_by(ProjectGrant.prefix)
        )
    )


def places(session: Session, settings: Settings, project: str) -> ProjectPlaces:
    """What ``project``'s jobs may use now."""
    if project == DEFAULT_PROJECT:
        return places_of(settings.artifact_root, project, ())
    granted = [Place(row.prefix, _access(row.access)) for row in grants(session, project)]
    return places_of(settings.artifact_root, project, granted)


def data_access(session: Session, settings: Settings, project: str) -> DataAccess:
    others = session.execute(
        select(ProjectGrant.prefix).where(
            ProjectGrant.project != project, ProjectGrant.access == READ_WRITE
        )
    ).scalars()
    return DataAccess(
        places(session, settings, project),
        tuple(Place(prefix, READ_WRITE) for prefix in others),
    )


def taken_by_others(session: Session, project: str, found: Iterable[str]) -> list[JobWritePlace]:
    """Where jobs of projects other than ``project`` write or wrote, among the places
    that share anything with the keys ``found``."""
    conditions = [_sharing(JobWritePlace.key, key) for key in found]
    if not conditions:
        return []
    return list(
        session.scalars(
            select(JobWritePlace)
            .where(JobWritePlace.project != project, or_(*conditions))
            .order_by(JobWritePlace.key)
            .limit(10)
        )
    )


def first_taken_each(
    session: Session, wanted: Sequence[tuple[str, Sequence[str]]]
) -> list[str | None]:
    """For each ``(project, keys)``: the first key (in the column's order) of a place where
    a job of another project writes or wrote that shares anything with ``keys``, or None.
    One statement for them all: the jobs a batch of creates stores are checked in one
    round trip, not one each. Its text is written here, with the same conditions as
    ``_sharing``: built as SQLAlchemy expressions, a batch's statement (of a shape rarely
    seen twice) cost more to build and compile than the queries it replaced.

    Each condition (the key and its ancestors named, the keys below it as one range) is
    its own ``ORDER BY key LIMIT 1``, so that each is read off the key's index. Joined by
    OR in one, PostgreSQL walked the whole index in key order to find the first match:
    7 ms a create with 10,000 jobs' places stored, growing with every job."""
    branches: list[str] = []
    values: dict[str, str] = {}
    for index, (project, found) in enumerate(wanted):
        firsts = []
        for number, key in enumerate(found):
            below = key if key.endswith("/") else key + "/"
            named = [key, *ancestors(key)]
            names = [f"k{index}_{number}_{at}" for at in range(len(named))]
            values.update(zip(names, named, strict=True))
            values[f"lo{index}_{number}"] = below
            values[f"hi{index}_{number}"] = below[:-1] + "0"
            listed = ", ".join(f":{name}" for name in names)
            for kind, condition in (
                ("n", f"key IN ({listed})"),
                ("r", f"key >= :lo{index}_{number} AND key < :hi{index}_{number}"),
            ):
                # Only numbers and parameter names go into the text; every value is bound.
                firsts.append(
                    f"SELECT key FROM (SELECT key FROM job_write_places "  # noqa: S608
                    f"WHERE project != :p{index} AND {condition} ORDER BY key LIMIT 1) "
                    f"AS {kind}{index}_{number}"
                )
        if firsts:
            values[f"p{index}"] = project
            branches.append(
                f"SELECT * FROM (SELECT {index} AS job, key FROM "  # noqa: S608
                f"({' UNION ALL '.join(firsts)}) AS c{index} ORDER BY key LIMIT 1) AS b{index}"
            )
    first: list[str | None] = [None for _ in wanted]
    if branches:
        for job, key in session.execute(_statement(" UNION ALL ".join(branches)), values):
            first[job] = key
    return first


@functools.lru_cache(maxsize=256)
def _statement(written: str) -> TextClause:
    """The statement of a text, made once: its text depends only on how many jobs, keys and
    folders above each a batch has, and making one (finding its parameters) was a quarter
    of the check's CPU."""
    return text(written)


def _sharing(column: InstrumentedAttribute[str], key: str) -> ColumnElement[bool]:
    """Keys of ``column`` that are ``key``, above it, or below it: equality and one range
    (the column compares byte by byte), each answered by its index."""
    below = key if key.endswith("/") else key + "/"
    return or_(
        column.in_([key, *ancestors(key)]),
        and_(column >= below, column < below[:-1] + "0"),
    )


def grant(
    session: Session, settings: Settings, project: str, prefix: str, access: Access
) -> tuple[ProjectGrant, bool]:
    """Grant ``project`` the place ``prefix`` (or change how): the grant, and whether it
    is new."""
    require_project(session, project)
    if project == DEFAULT_PROJECT:
        raise Conflict(
            f"project {DEFAULT_PROJECT!r} reaches what the server's file roots and its own "
            "credentials reach: grants are for the other projects"
        )
    _check_against_settings(settings, prefix, access)
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": GRANTS_LOCK})
    if access == READ_WRITE:
        _check_writers(session, project, prefix)
    row = session.scalar(
        select(ProjectGrant).where(ProjectGrant.project == project, ProjectGrant.prefix == prefix)
    )
    created = row is None
    if row is None:
        row = ProjectGrant(project=project, prefix=prefix, access=access)
        session.add(row)
    row.access = access
    session.flush()
    access_cache.forget_once_committed(session)
    return row, created


def revoke(session: Session, project: str, prefix: str) -> None:
    require_project(session, project)
    row = session.scalar(
        select(ProjectGrant).where(ProjectGrant.project == project, ProjectGrant.prefix == prefix)
    )
    if row is None:
        raise NotFound(f"project {project!r} has no grant of {prefix}")
    session.delete(row)
    session.flush()
    access_cache.forget_once_committed(session)


def _check_against_settings(settings: Settings, prefix: str, access: Access) -> None:
    found = keys(prefix)
    if prefix.startswith("file://"):
        outside = file_roots.uri_problem(prefix, settings.file_roots)
        if outside is not None:
            raise SpecError(("prefix",), outside)
    artifacts = keys(settings.artifact_root)
    if overlap(found, artifacts):
        if access == READ_WRITE:
            raise SpecError(
                ("prefix",),
                f"shares the artifact root ({settings.artifact_root}), where each project "
                "writes in its own area only: grant it read-only, or a place outside it",
            )
        if any(covers(found, key) for key in artifacts):
            raise SpecError(
                ("prefix",),
                f"holds the whole artifact root ({settings.artifact_root}), every project's "
                "area: grant a place inside it",
            )
        return
    if prefix.startswith("file://") and overlap(found, keys(settings.home.as_uri())):
        raise SpecError(
            ("prefix",),
            f"shares the server's own directory ({settings.home}: its database, keys and logs)",
        )


def _check_writers(session: Session, project: str, prefix: str) -> None:
    found = keys(prefix)
    others = session.scalars(
        select(ProjectGrant).where(
            ProjectGrant.project != project, ProjectGrant.access == READ_WRITE
        )
    )
    for other in others:
        if overlap(found, keys(other.prefix)):
            raise Conflict(
                f"project {other.project!r} may write {other.prefix}, which shares places "
                f"with {prefix}: a place is written by one project's jobs only"
            )
    taken = taken_by_others(session, project, found)
    if taken:
        owners = ", ".join(sorted({row.project for row in taken}))
        raise Conflict(
            f"jobs of project {owners} write or wrote in {prefix} "
            f"({_uri_of(taken[0].key)}): grant it read-only, or delete those jobs with "
            "their artifacts first"
        )


def _uri_of(key: str) -> str:
    """A key as the URI people write (a file:// key holds its path unescaped)."""
    if key.startswith("file://"):
        return PurePosixPath(key.removeprefix("file://")).as_uri()
    return key


def _access(value: str) -> Access:
    return READ_WRITE if value == READ_WRITE else "read-only"


def writable_keys(uris: Sequence[str]) -> tuple[str, ...]:
    """Every key of the places ``uris`` name, once each."""
    return tuple(dict.fromkeys(key for uri in uris for key in keys(uri)))


@dataclass(frozen=True)
class InstanceRoots:
    """Where a job's instances' runtimes hold its file:// URIs (``contract.file_confinement``)."""

    # Read and written.
    writable: tuple[str, ...]
    # Only read.
    read_only: tuple[str, ...]
    # Held even with no roots at all (a project granted no local place).
    confined: bool


def instance_roots(settings: Settings, places: ProjectPlaces) -> InstanceRoots:
    """The server's file roots for the default project; for another, its own file://
    places that the server's roots hold too (an operator's narrower roots outlive a
    grant)."""
    if not places.restricted:
        return InstanceRoots(tuple(str(root) for root in settings.file_roots), (), False)

    def within(paths: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(
            path
            for path in paths
            if file_roots.uri_problem(Path(path).as_uri(), settings.file_roots) is None
        )

    return InstanceRoots(
        within(places.file_roots(writable=True)),
        within(places.file_roots(writable=False)),
        confined=True,
    )
