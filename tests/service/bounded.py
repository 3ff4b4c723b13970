"""What the tests of bounded requests share: jobs with records as large as a spec may be,
and the statements a request ran on the jobs' table, to see how much each could read."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, event
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import BinaryExpression, BindParameter

from service.jobs.models import TrainingJob
from service.kit.db import get_engine

# Hyperparameters and environment near their limits (90 of them, room for what the SDK adds
# among SageMaker's 100): a record of about 130 KB.
LARGE_HYPERPARAMETERS = {f"hp_{n:03d}": "h" * 1000 for n in range(90)}
LARGE_ENVIRONMENT = {f"VAR_{n:03d}": "e" * 380 for n in range(100)}
_TABLE = TrainingJob.__table__
_RECORDS = {"spec", "sagemaker_request"}


@dataclass(frozen=True)
class Read:
    """One SELECT on the jobs' table: whether it returned records whole (a column named
    spec or sagemaker_request), and the most rows it could return (its LIMIT, or the ids
    it named; None: no bound)."""

    records: bool
    most_rows: int | None


def _ids_named(statement: Select[Any]) -> int | None:
    for element in visitors.iterate(statement):
        if (
            isinstance(element, BinaryExpression)
            and element.operator is operators.in_op
            and _TABLE.c.id.shares_lineage(element.left)
            and isinstance(element.right, BindParameter)
        ):
            return len(element.right.value)
    return None


def _read(statement: Select[Any], columns: list[str]) -> Read:
    limit = statement._limit  # the LIMIT it was built with
    bounds = [bound for bound in (limit, _ids_named(statement)) if bound is not None]
    return Read(bool(_RECORDS & set(columns)), min(bounds) if bounds else None)


@contextmanager
def reads_of_jobs(url: str) -> Iterator[list[Read]]:
    """Each SELECT run meanwhile whose FROM holds the jobs' table."""
    reads: list[Read] = []

    def seen(_conn: Any, cursor: Any, _sql: str, _params: Any, context: Any, _many: bool) -> None:
        statement = getattr(context, "invoked_statement", None)
        if isinstance(statement, Select) and _TABLE in statement.get_final_froms():
            # The columns as the database returns them: a record read whole is named as
            # its column; what is read out of one is labelled otherwise.
            columns = [column[0] for column in cursor.description or []]
            reads.append(_read(statement, columns))

    engine = get_engine(url)
    event.listen(engine, "after_cursor_execute", seen)
    try:
        yield reads
    finally:
        event.remove(engine, "after_cursor_execute", seen)
