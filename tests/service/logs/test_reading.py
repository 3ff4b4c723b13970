"""Reading lines out of their chunks: a host's by seq, either way; several hosts' merged in
time order however their chunks overlap in time; and a read from a time on looks at the
chunks near it, not at every chunk before it."""

from __future__ import annotations

import threading
import uuid
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event

from service.jobs.models import TrainingJob
from service.kit.db import get_engine, session_scope, to_micros
from service.logs import reading, repository
from service.logs import service as logs
from service.logs.models import CHUNK_SPAN, LogChunk
from service.logs.schemas import Packed

START = to_micros(datetime(2026, 6, 1, tzinfo=UTC)) / 1_000_000
SPAN = CHUNK_SPAN.total_seconds()


def _job(database_url: str) -> str:
    job_id = uuid.uuid4().hex
    with session_scope(database_url) as session:
        session.add(
            TrainingJob(
                id=job_id,
                name=f"job-{job_id[:8]}",
                spec={"instance_count": 2, "instance_type": "local"},
                backend="local",
                status="InProgress",
                secondary_status="Training",
            )
        )
    return job_id


def _store(database_url: str, job_id: str, host: str, first_seq: int, stamps: list[float]) -> None:
    rows = [(stamp, "stdout", f"{host} {seq}") for seq, stamp in enumerate(stamps, first_seq)]
    with session_scope(database_url) as session:
        repository.insert_rows(session, job_id, host, first_seq, rows)


def _by_time(database_url: str, job_id: str, **where: Any) -> list[str]:
    with (
        session_scope(database_url, readonly=True) as session,
        closing(reading.by_time(session, (LogChunk.job_id == job_id,), **where)) as lines,
    ):
        return [line.message for line in lines]


def test_hosts_merge_in_time_order_across_overlapping_chunks(database_url: str) -> None:
    job_id = _job(database_url)
    # algo-1's lines a second apart, a chunk each batch; algo-2's one batch spans all of
    # them, and its clock stepped back once (a chunk's lines need not be in time order).
    for first in range(1, 10, 3):
        _store(database_url, job_id, "algo-1", first, [START + s for s in range(first, first + 3)])
    _store(database_url, job_id, "algo-2", 1, [START + 0.5, START + 4.5, START + 2.5, START + 9.5])
    assert _by_time(database_url, job_id) == [
        "algo-2 1",
        "algo-1 1",
        "algo-1 2",
        "algo-2 3",
        "algo-1 3",
        "algo-1 4",
        "algo-2 2",
        "algo-1 5",
        "algo-1 6",
        "algo-1 7",
        "algo-1 8",
        "algo-1 9",
        "algo-2 4",
    ]
    # A window, and a place to go on from (the line at START + 4, algo-1's 4th).
    window = {"start": to_micros_of(START + 2.5), "end": to_micros_of(START + 6)}
    assert _by_time(database_url, job_id, **window) == [
        "algo-2 3",
        "algo-1 3",
        "algo-1 4",
        "algo-2 2",
        "algo-1 5",
    ]
    with session_scope(database_url, readonly=True) as session:
        fourth = next(
            line for line in reading.by_seq(session, job_id, "algo-1", after=3) if line.seq == 4
        )
    after = _by_time(database_url, job_id, after=(fourth.micros, fourth.id))
    assert after[:2] == ["algo-2 2", "algo-1 5"]


def test_a_host_reads_by_seq_either_way(database_url: str) -> None:
    job_id = _job(database_url)
    _store(database_url, job_id, "algo-1", 1, [START + s for s in range(5)])
    _store(database_url, job_id, "algo-1", 6, [START + s for s in range(5, 10)])
    with session_scope(database_url, readonly=True) as session:
        forward = [line.seq for line in reading.by_seq(session, job_id, "algo-1", after=3)]
        back = reading.by_seq(session, job_id, "algo-1", before=8, descending=True)
        backward = [line.seq for line in back]
        between = reading.by_seq(session, job_id, "algo-1", after=2, before=7)
        assert [line.seq for line in between] == [3, 4, 5, 6]
    assert forward == [4, 5, 6, 7, 8, 9, 10]
    assert backward == [7, 6, 5, 4, 3, 2, 1]


@pytest.fixture
def read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The first seq of each chunk a reader reads out, in order."""
    seqs: list[int] = []
    read_chunk = reading.lines_of

    def counted(chunk: Any) -> list[Any]:
        seqs.append(chunk.first_seq)
        return read_chunk(chunk)

    # Counted, not changed: the lines each chunk holds are what the reader gets.
    monkeypatch.setattr(reading, "lines_of", counted)
    return seqs


def test_a_read_from_a_time_on_looks_only_at_the_chunks_near_it(
    database_url: str, read: list[int]
) -> None:
    job_id = _job(database_url)
    # A hundred chunks of ten lines, a chunk's span apart.
    for chunk in range(100):
        begins = START + chunk * SPAN
        _store(database_url, job_id, "algo-1", chunk * 10 + 1, [begins + s for s in range(10)])
    statements: list[tuple[str, Any]] = []

    def keep(_conn: Any, _cursor: Any, sql: str, params: Any, *_: Any) -> None:
        statements.append((sql, params))

    event.listen(get_engine(database_url), "before_cursor_execute", keep)
    with (
        session_scope(database_url, readonly=True) as session,
        closing(
            reading.by_time(
                session, (LogChunk.job_id == job_id,), start=to_micros_of(START + 90 * SPAN)
            )
        ) as lines,
    ):
        first = [next(lines).seq for _ in range(3)]
    event.remove(get_engine(database_url), "before_cursor_execute", keep)
    assert first == [901, 902, 903]
    # Only the chunk that holds them was read out: not the ninety before, nor the nine after
    # (the next one's row tells that none of its lines is earlier, unread).
    assert read == [901]
    # And the database found the chunks off the index from a span before the time on, not
    # by filtering every chunk of the job.
    assert _chunk_rows_passed_over(database_url, statements) <= 1


def _chunk_rows_passed_over(database_url: str, statements: list[tuple[str, Any]]) -> int:
    """The chunk rows the reads' plans looked at and left out, where each searched a range
    of first_time in the index; 100 (every chunk) for each read that did not."""
    engine = get_engine(database_url)
    by_time = [(sql, params) for sql, params in statements if "log_chunks" in sql]
    assert by_time
    passed = 0
    with engine.connect() as connection:
        for sql, params in by_time:
            if engine.dialect.name == "sqlite":
                plan = " ".join(
                    str(row[-1])
                    for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params)
                )
                ranged = "first_time>" in plan  # SQLite's plans count no rows
            else:
                analyzed = connection.exec_driver_sql(
                    f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params
                ).scalar_one()[0]["Plan"]
                ranged = any("first_time >=" in cond for cond in _index_conditions(analyzed))
                passed += _removed(analyzed)
            passed += 0 if ranged else 100
    return passed


def _index_conditions(node: dict[str, Any]) -> list[str]:
    own = [node["Index Cond"]] if "Index Cond" in node else []
    return own + [cond for child in node.get("Plans", []) for cond in _index_conditions(child)]


def _removed(node: dict[str, Any]) -> int:
    own = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return own + sum(_removed(child) for child in node.get("Plans", []))


def to_micros_of(seconds: float) -> int:
    return round(seconds * 1_000_000)


def test_chunks_that_begin_at_one_time_are_read_out_a_page_at_a_time(
    database_url: str, read: list[int]
) -> None:
    """Lines that all share one time (a console kept at a job's end is stamped so) are
    given in the order they arrived, and a page reads out only the chunks it needs: its
    own, and none of those before its place or after it."""
    job_id = _job(database_url)
    for first in range(1, 200, 10):
        _store(database_url, job_id, "algo-1", first, [START] * 10)
    seen: list[int] = []
    place = None
    while True:
        read.clear()
        with (
            session_scope(database_url, readonly=True) as session,
            closing(reading.by_time(session, (LogChunk.job_id == job_id,), after=place)) as lines,
        ):
            page = [line for line, _ in zip(lines, range(3), strict=False)]
        if not page:
            break
        seen += [line.seq for line in page]
        place = (page[-1].micros, page[-1].id)
        # The page's lines lie in at most two chunks; none before it is read out again.
        assert len(read) <= 2, read
    assert seen == list(range(1, 201))


def test_two_batches_of_one_host_at_once_store_each_line_once(database_url: str) -> None:
    """A batch retried while the first is still being stored, with more lines: the second
    waits for the first's commit and stores only the lines after it."""
    job_id = _job(database_url)
    first = Packed(1, [(START + n, "stdout", f"line {n}") for n in range(1, 101)])
    second = Packed(1, [(START + n, "stdout", f"line {n}") for n in range(1, 151)])
    stored: dict[str, int] = {}
    with session_scope(database_url) as holding:
        stored["first"] = logs.ingest(holding, job_id, "algo-1", first)

        def ingest_second() -> None:
            with session_scope(database_url) as session:
                stored["second"] = logs.ingest(session, job_id, "algo-1", second)

        racer = threading.Thread(target=ingest_second)
        racer.start()
        racer.join(1.0)
        # Still waiting for the first batch's transaction.
        assert racer.is_alive()
    racer.join(30)
    assert stored == {"first": 100, "second": 50}
    with session_scope(database_url, readonly=True) as session:
        seqs = [line.seq for line in reading.by_seq(session, job_id, "algo-1")]
    assert seqs == list(range(1, 151))
