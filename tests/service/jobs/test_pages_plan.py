"""A page of jobs, or of a job's log, is read off an index in the page's order, whatever
the filter and whatever the planner's statistics: without them (autovacuum off, or a
burst of jobs or lines since it last ran) PostgreSQL estimated a few matching rows, and
read and sorted every one of them for each page."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from service.jobs import repository
from service.jobs.listing import JobFilters
from service.jobs.schemas import JobCreate
from service.kit.db import get_engine, session_scope
from service.logs import service as logs
from service.logs.schemas import Line
from service.settings import Settings
from service.training import preparation, service
from tests.conftest import grant, job_spec

# A project no statistics can know: its jobs are all new.
PROJECT = "paged"
# Lines of each of two jobs' logs.
LINES = 5000


@contextmanager
def _plans(settings: Settings) -> Iterator[list[str]]:
    """The plan of each SELECT run meanwhile, explained in its own transaction."""
    plans: list[str] = []
    engine = get_engine(settings.database_url)
    sqlite = engine.dialect.name == "sqlite"

    def explain(_conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if not statement.lstrip().upper().startswith("SELECT"):
            return
        explaining = cursor.connection.cursor()
        explaining.execute(
            ("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + statement, parameters
        )
        plans.append("\n".join(str(row[-1]) for row in explaining.fetchall()))
        explaining.close()

    event.listen(engine, "after_cursor_execute", explain)
    try:
        yield plans
    finally:
        event.remove(engine, "after_cursor_execute", explain)


@pytest.fixture
def stored(settings: Settings, source_dir: Path) -> str:
    """300 jobs, and the logs of two of them: the first one's id."""
    grant(settings, PROJECT, source_dir.as_uri())  # the jobs' code, for a project's jobs
    prepared = [
        (
            preparation.prepare(
                settings, JobCreate.model_validate(job_spec(source_dir, name=f"paged-{n}")), PROJECT
            ),
            PROJECT,
        )
        for n in range(300)
    ]
    with session_scope(settings.database_url) as session:
        jobs = service.store_new(session, settings, prepared)
        # Two jobs' logs, so that the page's job is a part of the table.
        for job in jobs[:2]:
            logs.ingest(session, job.id, "algo-1", [_line(seq) for seq in range(1, LINES + 1)])
    return jobs[0].id


def _line(seq: int) -> Line:
    return Line(seq, 1_800_000_000_000_000 + seq, "stdout", "a line")


@pytest.mark.usefixtures("stored")
@pytest.mark.parametrize(
    "filters",
    [
        {"project": PROJECT, "status": None, "name_prefix": None},
        {"project": PROJECT, "status": "InProgress", "name_prefix": None},
        {"project": None, "status": "InProgress", "name_prefix": None},
        {"project": PROJECT, "status": None, "name_prefix": "paged-1"},
    ],
    ids=["project", "project-and-status", "status", "name-prefix"],
)
def test_a_page_is_read_in_its_order_off_an_index(
    settings: Settings, filters: dict[str, Any]
) -> None:
    with _plans(settings) as plans, session_scope(settings.database_url, readonly=True) as session:
        rows, cursor = repository.page(session, JobFilters(**filters), limit=50, cursor=None)
        assert rows
        assert cursor is not None
        repository.page(
            session, JobFilters(**filters), limit=50, cursor=cursor
        )  # and the next page
    _assert_read_in_order([plan for plan in plans if "training_jobs" in plan])


@pytest.mark.parametrize("host", [None, "algo-1"], ids=["all-hosts", "one-host"])
def test_a_page_of_a_log_is_read_in_its_order_off_an_index(
    settings: Settings, stored: str, host: str | None
) -> None:
    with _plans(settings) as plans, session_scope(settings.database_url, readonly=True) as session:
        rows, cursor = logs.page(session, stored, host=host, cursor=None, limit=50)
        assert rows
        assert cursor is not None
        logs.page(session, stored, host=host, cursor=cursor, limit=50)
    _assert_read_in_order([plan for plan in plans if "log_chunks" in plan])


def _assert_read_in_order(pages: list[str]) -> None:
    # Two pages: a statement each, or two where a filter is tested on a window of the
    # order (service.kit.scan) and its rows are then read by id.
    assert len(pages) in (2, 4)
    for plan in pages:
        # PostgreSQL's Sort node; SQLite's "USE TEMP B-TREE FOR ORDER BY".
        assert "Sort" not in plan, plan
        assert "B-TREE" not in plan, plan
