"""Whether a job would write where another project's jobs write is read off the key's
index, whatever the number of places stored: the statement's cost must not grow with
every job ever submitted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, insert, text

from service.grants import service as grants
from service.grants.places import keys
from service.jobs.models import JobWritePlace
from service.kit.db import get_engine, session_scope

pytestmark = pytest.mark.postgres

PLACES = 10000
ROOT = "file:///srv/artifacts"


@pytest.fixture
def many_places(postgres_url: str) -> Iterator[str]:
    """``PLACES`` places of project "default"'s jobs, each its own folder of the root, as
    a server that has taken that many jobs holds them. Not analyzed since: the table grows
    faster than its statistics, and PostgreSQL then chose, for the conditions joined by
    OR, to walk the whole index in key order (a bench's 10,000 jobs, 7 ms a create)."""
    with session_scope(postgres_url) as session:
        session.execute(
            insert(JobWritePlace),
            [
                {"job_id": None, "project": "default", "key": f"{ROOT}/job-{number}"}
                for number in range(PLACES)
            ],
        )
    yield postgres_url
    with session_scope(postgres_url) as session:
        session.execute(text("DELETE FROM job_write_places"))


def _rows_filtered_out(plan: Any) -> int:
    """The rows a plan's nodes read and threw away, all nodes together."""
    if isinstance(plan, list):
        return sum(_rows_filtered_out(each) for each in plan)
    if not isinstance(plan, dict):
        return 0
    own = int(plan.get("Rows Removed by Filter", 0))
    return own + sum(_rows_filtered_out(value) for value in plan.values())


def test_the_check_of_a_batch_reads_only_the_keys_it_asks_about(many_places: str) -> None:
    wanted = [("default", keys(f"{ROOT}/new-{number}")) for number in range(4)] + [
        ("other", keys(f"{ROOT}/job-7"))
    ]
    sent: list[tuple[str, Any]] = []

    def keep(_conn: object, _cursor: object, statement: str, parameters: Any, *_: object) -> None:
        if "job_write_places" in statement:
            sent.append((statement, parameters))

    engine = get_engine(many_places)
    event.listen(engine, "before_cursor_execute", keep)
    try:
        with session_scope(many_places) as session:
            first = grants.first_taken_each(session, wanted)
    finally:
        event.remove(engine, "before_cursor_execute", keep)
    # The answers: only project "other" finds a place of another project's (default's).
    assert first == [None, None, None, None, f"{ROOT}/job-7"]
    ((statement, parameters),) = sent
    with get_engine(many_places).connect() as connection:
        cursor = connection.connection.cursor()
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
        row = cursor.fetchone()
    assert row is not None
    plan = json.loads(row[0]) if isinstance(row[0], str) else row[0]
    # Read off the index: each condition meets only its own keys. Joined by OR in one
    # ordered scan, it threw away every one of the PLACES rows, once a job (46,667 rows
    # for this batch).
    assert _rows_filtered_out(plan) < 20, json.dumps(plan)[:2000]
