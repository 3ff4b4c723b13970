"""A page of a job's log holds at most 1 MB of events, as CloudWatch's pages do, whatever
its lines' length; the next page starts exactly where it stopped; and the lines are read
from the database as the page fills, not loaded whole first. A download streams such pages."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from service.kit.db import get_engine
from service.logs import pages, reading
from service.logs.models import CHUNK_CHARACTERS
from service.settings import Settings
from tests.conftest import log_line, submit_for_instances

# Lines as long as a runtime sends them (it cuts longer ones), and enough of them for six
# pages: a page of 10,000 lines would hold all of them, 6.4 MB.
LONG = 16_000
LINES = 400
# 65 such events take 1,041,690 bytes with CloudWatch's 26 each; one more would pass 1 MiB.
PER_PAGE = 65


def long_line(seq: int) -> str:
    return f"{seq:06d} " + "x" * (LONG - 7)


def ship_long_lines(api: TestClient, settings: Settings, source_dir: Path) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    half = LINES // 2
    for first in (1, half + 1):
        lines = [log_line(seq, seq // 8, long_line(seq)) for seq in range(first, first + half)]
        assert api.post(url, json={"lines": lines}, headers=headers).status_code == 200


# The lines a chunk of such lines holds, and what a page may read past its end: the rest of
# the chunks fetched with the last one it took.
PER_CHUNK = CHUNK_CHARACTERS // LONG
BEYOND_A_PAGE = reading.READ_CHUNKS * PER_CHUNK


class Reads:
    """The log lines read out of their chunks after each statement on the database."""

    def __init__(self) -> None:
        self.per_statement: list[int] = [0]

    def statement(self, *_args: Any) -> None:
        self.per_statement.append(0)

    def loaded(self, lines: list[Any]) -> None:
        self.per_statement[-1] += len(lines)

    @property
    def most(self) -> int:
        return max(self.per_statement)


@contextmanager
def counted_reads(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    reads = Reads()
    engine = get_engine(settings.database_url)
    read_chunk = reading.lines_of

    def counted(chunk: Any) -> list[Any]:
        lines = read_chunk(chunk)
        reads.loaded(lines)
        return lines

    # Counted, not changed: the lines a chunk holds are what the reader gets.
    monkeypatch.setattr(reading, "lines_of", counted)
    event.listen(engine, "before_cursor_execute", reads.statement)
    try:
        yield reads
    finally:
        event.remove(engine, "before_cursor_execute", reads.statement)


def page_bytes(messages: list[str]) -> int:
    return sum(len(message.encode()) + pages.EVENT_OVERHEAD for message in messages)


def test_a_page_of_long_lines_stops_at_a_megabyte_and_the_next_resumes_exactly(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ship_long_lines(api, settings, source_dir)
    seen: list[str] = []
    sizes: list[int] = []
    cursor = None
    with counted_reads(settings, monkeypatch) as reads:
        while True:
            params: dict[str, Any] = {"limit": 10_000, **({"cursor": cursor} if cursor else {})}
            answer = api.get("/v1/training-jobs/job-1/logs", params=params).json()
            messages = [e["message"] for e in answer["events"]]
            assert page_bytes(messages) <= pages.PAGE_BYTES
            sizes.append(len(messages))
            seen += messages
            if (cursor := answer["next_cursor"]) is None:
                break
    assert sizes == [PER_PAGE] * 6 + [LINES - 6 * PER_PAGE]
    assert seen == [long_line(seq) for seq in range(1, LINES + 1)]
    # Each page read its lines a few chunks at a time and stopped once full: never the 400
    # that its limit allows.
    assert reads.most <= PER_PAGE + BEYOND_A_PAGE < LINES


def test_a_log_download_streams_pages_of_at_most_a_megabyte(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ship_long_lines(api, settings, source_dir)
    with counted_reads(settings, monkeypatch) as reads:
        text = api.get("/v1/training-jobs/job-1/logs/download").text
    assert [line.split(" ", 2)[2] for line in text.splitlines()] == [
        long_line(seq) for seq in range(1, LINES + 1)
    ]
    assert reads.most <= PER_PAGE + BEYOND_A_PAGE < LINES
