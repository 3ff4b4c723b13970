"""DescribeLogStreams over the whole log group and FilterLogEvents across many streams cost
a bounded amount whatever the project holds: they walk the jobs off an index, stop at a
budget of jobs, streams and lines looked at, and answer a token that resumes exactly (a
page may be short or empty, with a token, as CloudWatch's are). Paged through, every stream
and every line comes once; a token of another request is refused."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from fastapi.testclient import TestClient
from sqlalchemy import event

from service.kit.db import get_engine
from service.sagemaker import log_streams
from service.settings import Settings
from tests.conftest import log_line, submit_for_instances
from tests.service.bounded import reads_of_jobs
from tests.service.sagemaker.test_logs import GROUP, logs  # noqa: F401 (a fixture)

# Jobs lg-0 .. lg-5 on two hosts; lg-3 printed nothing, lg-4's algo-2 nothing.
JOBS = 6
SILENT = {("lg-3", "algo-1"), ("lg-3", "algo-2"), ("lg-4", "algo-2")}
LINES_PER_HOST = 3
HOSTS = ("algo-1", "algo-2")


@pytest.fixture
def many_streams(api: TestClient, settings: Settings, source_dir: Path) -> list[str]:
    """The messages shipped, in (job name, time, arrival) order."""
    shipped: list[str] = []
    for n in range(JOBS):
        name = f"lg-{n}"
        headers = submit_for_instances(api, settings, source_dir, name=name, instance_count=2)
        for host in ("algo-1", "algo-2"):
            if (name, host) in SILENT:
                continue
            lines = [
                log_line(seq, seq * 2 + (host == "algo-2"), f"{name} {host} line {seq}")
                for seq in range(1, LINES_PER_HOST + 1)
            ]
            url = f"/v1/training-jobs/{name}/instances/{host}/logs"
            response = api.post(url, json={"lines": lines}, headers=headers.of(host))
            assert response.status_code == 200, response.text
    for n in range(JOBS):
        for seq in range(1, LINES_PER_HOST + 1):
            for host in ("algo-1", "algo-2"):
                if (f"lg-{n}", host) not in SILENT:
                    shipped.append(f"lg-{n} {host} line {seq}")
    return shipped


@pytest.fixture
def small_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_streams, "JOBS_LOOKED_AT", 2)
    monkeypatch.setattr(log_streams, "STREAMS_LOOKED_AT", 3)
    monkeypatch.setattr(log_streams, "LINES_LOOKED_AT", 4)


@contextmanager
def statements_on_lines(url: str) -> Iterator[list[str]]:
    """The SQL of each statement run meanwhile that reads the lines' table."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, sql: str, *_rest: Any) -> None:
        if "log_chunks" in sql and sql.lstrip().upper().startswith("SELECT"):
            seen.append(sql)

    engine = get_engine(url)
    event.listen(engine, "after_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "after_cursor_execute", record)


def followed(call: Any, key: str, **params: Any) -> list[list[Any]]:
    """Each page ``call`` answers for ``params``, followed to the last token."""
    found: list[list[Any]] = []
    more: dict[str, str] = {}
    while True:
        answer = call(logGroupName=GROUP, **params, **more)
        found.append(answer[key])
        if "nextToken" not in answer:
            return found
        more = {"nextToken": answer["nextToken"]}


def expected_streams() -> list[str]:
    return [
        f"lg-{n}/{host}"
        for n in range(JOBS)
        for host in ("algo-1", "algo-2")
        if (f"lg-{n}", host) not in SILENT
    ]


def short(name: str) -> str:
    return name.rsplit("-", 1)[0]  # without the epoch


@pytest.mark.usefixtures("many_streams", "small_budgets")
def test_streams_of_the_group_page_by_name_at_a_budget_and_resume_exactly(
    logs: Any,  # noqa: F811
    settings: Settings,
) -> None:
    with (
        reads_of_jobs(settings.database_url) as reads,
        statements_on_lines(settings.database_url) as lines,
    ):
        pages = followed(logs.describe_log_streams, "logStreams", limit=2)
    names = [short(s["logStreamName"]) for page in pages for s in page]
    assert names == expected_streams()
    assert all(len(page) <= 2 for page in pages)
    # Each request looked at no more than its budget: jobs (one more, to know), streams.
    assert reads
    assert not any(read.records for read in reads)
    assert all(read.most_rows is not None and read.most_rows <= 3 for read in reads)
    assert len(reads) == len(pages)
    # A point lookup (first line, last line, last seq) for each of at most 3 streams.
    assert lines
    assert all(sql.count("FROM log_chunks") <= 3 * 3 for sql in lines)
    # Described from each stream's first and last line.
    first = pages[0][0]
    assert first["uploadSequenceToken"] == str(LINES_PER_HOST)
    assert first["firstEventTimestamp"] <= first["lastEventTimestamp"]

    descending = followed(logs.describe_log_streams, "logStreams", descending=True, limit=3)
    assert [short(s["logStreamName"]) for p in descending for s in p] == list(
        reversed(expected_streams())
    )


@pytest.mark.usefixtures("many_streams", "small_budgets")
def test_streams_by_last_event_time_follow_their_jobs_newest_first(logs: Any) -> None:  # noqa: F811
    pages = followed(
        logs.describe_log_streams, "logStreams", orderBy="LastEventTime", descending=True
    )
    names = [short(s["logStreamName"]) for page in pages for s in page]
    newest_first = [
        name
        for n in reversed(range(JOBS))
        for name in reversed(expected_streams())
        if name.startswith(f"lg-{n}/")
    ]
    assert names == newest_first


@pytest.mark.usefixtures("small_budgets")
def test_the_sdks_stream_listing_of_one_job_still_answers_its_hosts(
    logs: Any,  # noqa: F811
    many_streams: list[str],
) -> None:
    answer = logs.describe_log_streams(
        logGroupName=GROUP, logStreamNamePrefix="lg-1/", orderBy="LogStreamName", limit=2
    )
    assert [short(s["logStreamName"]) for s in answer["logStreams"]] == [
        "lg-1/algo-1",
        "lg-1/algo-2",
    ]
    assert "nextToken" not in answer


@pytest.mark.usefixtures("small_budgets")
def test_filter_across_the_group_stops_at_its_budget_and_gives_every_line_once(
    logs: Any,  # noqa: F811
    settings: Settings,
    many_streams: list[str],
) -> None:
    with reads_of_jobs(settings.database_url) as reads:
        pages = followed(logs.filter_log_events, "events")
    messages = [e["message"] for page in pages for e in page]
    assert sorted(messages) == sorted(many_streams)
    assert len(messages) == len(set(messages))
    # A job at a time in name order, each job's lines in time order.
    jobs = [m.split()[0] for m in messages]
    assert jobs == sorted(jobs)
    assert messages[:6] == sorted(many_streams[:6], key=lambda m: (m.split()[3], m.split()[1]))
    # No page looked at more than its budget of lines, nor read a job's record.
    assert all(len(page) <= log_streams.LINES_LOOKED_AT for page in pages)
    assert len(pages) >= len(many_streams) // log_streams.LINES_LOOKED_AT
    assert not any(read.records for read in reads)
    assert all(read.most_rows is not None and read.most_rows <= 3 for read in reads)


@pytest.mark.usefixtures("many_streams", "small_budgets")
def test_filter_with_a_pattern_may_answer_empty_pages_with_a_token(logs: Any) -> None:  # noqa: F811
    pages = followed(logs.filter_log_events, "events", filterPattern='"lg-5 algo-2"', limit=2)
    messages = [e["message"] for page in pages for e in page]
    assert messages == [f"lg-5 algo-2 line {seq}" for seq in range(1, LINES_PER_HOST + 1)]
    assert [] in pages[:-1]  # pages that only looked at other jobs' lines
    prefixed = followed(logs.filter_log_events, "events", logStreamNamePrefix="lg-2/algo-2")
    assert [e["message"] for p in prefixed for e in p] == [
        f"lg-2 algo-2 line {seq}" for seq in range(1, LINES_PER_HOST + 1)
    ]


@pytest.mark.usefixtures("many_streams", "small_budgets")
def test_a_token_of_another_request_is_refused(logs: Any) -> None:  # noqa: F811
    streams = logs.describe_log_streams(logGroupName=GROUP, limit=1)
    events = logs.filter_log_events(logGroupName=GROUP, limit=1)
    for call, params in (
        (logs.describe_log_streams, {"descending": True, "nextToken": streams["nextToken"]}),
        (logs.describe_log_streams, {"nextToken": events["nextToken"]}),
        (logs.filter_log_events, {"filterPattern": "line", "nextToken": events["nextToken"]}),
        (logs.filter_log_events, {"nextToken": streams["nextToken"]}),
        (logs.filter_log_events, {"nextToken": "bm90IGEgdG9rZW4="}),
    ):
        with pytest.raises(ClientError) as caught:
            call(logGroupName=GROUP, **params)
        assert caught.value.response["Error"]["Code"] == "InvalidParameterException", params
    # The same request with another page size goes on from it.
    more = logs.filter_log_events(logGroupName=GROUP, limit=3, nextToken=events["nextToken"])
    assert events["events"][0]["message"] not in [e["message"] for e in more["events"]]


@pytest.mark.usefixtures("many_streams", "small_budgets")
def test_filter_over_named_streams_stops_at_its_budget_of_lines_and_resumes_exactly(
    logs: Any,  # noqa: F811
) -> None:
    """A pattern few lines hold is looked for a budget of lines at a time: pages short of
    it (empty ones too) come with a token, and every match comes once, in time order."""
    names = [
        s["logStreamName"]
        for page in followed(logs.describe_log_streams, "logStreams", logStreamNamePrefix="lg-5/")
        for s in page
    ]
    assert len(names) == 2
    pages = followed(
        logs.filter_log_events, "events", logStreamNames=names, filterPattern='"line 3"'
    )
    messages = [e["message"] for page in pages for e in page]
    assert messages == ["lg-5 algo-1 line 3", "lg-5 algo-2 line 3"]
    # Six lines, four looked at a request: the first page found nothing.
    assert pages[0] == []
    everything = followed(logs.filter_log_events, "events", logStreamNames=names)
    assert [len(page) for page in everything] == [4, 2]
    assert [e["message"] for page in everything for e in page] == [
        f"lg-5 {host} line {seq}" for seq in range(1, LINES_PER_HOST + 1) for host in HOSTS
    ]
