"""What instances send (phase reports, log lines) and how logs are read back."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, func, select

from contract.limits import MAX_LINE
from service.jobs.models import JobInstance, TrainingJob
from service.kit.db import get_engine, session_scope
from service.kit.pagination import encode_cursor
from service.logs import follow
from service.logs.models import CHUNK_CHARACTERS, CHUNK_SPAN, LogChunk
from service.settings import Settings
from tests.conftest import job_spec, log_line, submit_for_instances


def test_retried_log_batch_is_stored_once(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    batch = {"lines": [log_line(1, 0, "one"), log_line(2, 1, "two")]}
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    assert api.post(url, json=batch, headers=headers).json() == {"stored": 2}
    assert api.post(url, json=batch, headers=headers).json() == {"stored": 0}
    overlapping = {"lines": [log_line(2, 1, "two"), log_line(3, 2, "three")]}
    assert api.post(url, json=overlapping, headers=headers).json() == {"stored": 1}
    events = api.get("/v1/training-jobs/job-1/logs").json()["events"]
    assert [e["message"] for e in events] == ["one", "two", "three"]


def test_a_batch_is_stored_whole_with_its_times_in_utc(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    # As many lines as a batch may hold, one of them stamped in another time zone.
    lines = [log_line(seq, 0, f"line {seq}") for seq in range(1, 5001)]
    lines[-1]["time"] = "2026-01-01T02:00:01.250000+02:00"
    assert api.post(url, json={"lines": lines}, headers=headers).json() == {"stored": 5000}
    events = api.get("/v1/training-jobs/job-1/logs", params={"limit": 10_000}).json()["events"]
    assert [e["message"] for e in events] == [f"line {seq}" for seq in range(1, 5001)]
    assert datetime.fromisoformat(events[-1]["time"]) == datetime(
        2026, 1, 1, 0, 0, 1, 250000, tzinfo=UTC
    )


def test_a_packed_batch_is_numbered_from_its_first_seq_with_its_times_exact(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    # What the runtime sends: rows of [seconds since the epoch, stream, message].
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    start = datetime(2026, 11, 23, 22, 59, 59, 999_998, tzinfo=UTC)
    stamps = [(start + timedelta(microseconds=n)).timestamp() for n in range(5000)]
    rows = [[stamp, "stdout", f"line {n}"] for n, stamp in enumerate(stamps)]
    rows[1][1] = "stderr"
    batch = {"first_seq": 1, "rows": rows}
    assert api.post(url, json=batch, headers=headers).json() == {"stored": 5000}
    # Retried whole, then overlapping with the object form: only new seqs are stored.
    assert api.post(url, json=batch, headers=headers).json() == {"stored": 0}
    later = {
        "first_seq": 5000,
        "rows": [[stamps[-1], "stdout", "again"], [stamps[-1], "stdout", "new"]],
    }
    assert api.post(url, json=later, headers=headers).json() == {"stored": 1}
    events = api.get("/v1/training-jobs/job-1/logs", params={"limit": 10_000}).json()["events"]
    assert [e["seq"] for e in events] == list(range(1, 5002))
    assert [e["message"] for e in events[:3]] == ["line 0", "line 1", "line 2"]
    assert events[1]["stream"] == "stderr"
    assert events[-1]["message"] == "new"
    # Microseconds survive the float, across a second's change.
    times = [datetime.fromisoformat(e["time"]) for e in events[:3]]
    assert times == [
        start,
        start + timedelta(microseconds=1),
        datetime(2026, 11, 23, 23, tzinfo=UTC),
    ]


def test_a_packed_lines_nul_is_stored_replaced_and_its_neighbours_as_sent(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    # A message that spells the escape out (its backslash escaped) holds no NUL.
    rows = [[1.0, "stdout", "a\x00b"], [1.0, "stdout", "\\u0000 as text"]]
    assert api.post(url, json={"first_seq": 1, "rows": rows}, headers=headers).json() == {
        "stored": 2
    }
    events = api.get("/v1/training-jobs/job-1/logs").json()["events"]
    assert [e["message"] for e in events] == ["a\ufffdb", "\\u0000 as text"]


def test_lines_cut_into_chunks_read_back_in_time_order_across_hosts(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    """A batch spanning more than a chunk may, or holding more characters, is stored as
    several chunks, as is one whose seqs skip; pages across hosts still give every line
    once, in time order, however the chunks overlap in time."""
    headers = submit_for_instances(api, settings, source_dir, instance_count=2)
    url = "/v1/training-jobs/job-1/instances/{}/logs"
    span = CHUNK_SPAN.total_seconds()
    # An hour before log_line's times.
    start = datetime(2025, 12, 31, 23, tzinfo=UTC).timestamp()
    # algo-1: ten lines a third of a chunk's span apart (several chunks).
    slow = [[start + n * span / 3, "stdout", f"slow {n}"] for n in range(10)]
    answer = api.post(url.format("algo-1"), json={"first_seq": 1, "rows": slow}, headers=headers)
    assert answer.json() == {"stored": 10}
    # algo-2: long lines between algo-1's, more characters than a chunk holds; then lines
    # whose seqs skip (the object form), after all the others.
    long = "x" * (MAX_LINE - 100)
    wide = [[start + 1 + n * span / 80, "stderr", f"wide {n} {long}"] for n in range(40)]
    assert sum(len(message) for _, _, message in wide) > CHUNK_CHARACTERS
    algo_2 = headers.of("algo-2")
    answer = api.post(url.format("algo-2"), json={"first_seq": 1, "rows": wide}, headers=algo_2)
    assert answer.json() == {"stored": 40}
    skipping = {"lines": [log_line(seq, seq - 40, f"skip {seq}") for seq in (48, 50, 51)]}
    assert api.post(url.format("algo-2"), json=skipping, headers=algo_2).json() == {"stored": 3}
    with session_scope(settings.database_url, readonly=True) as session:
        chunks = session.scalar(select(func.count()).select_from(LogChunk))
    # algo-1's in three (its span), algo-2's batch in two (its characters), and a chunk for
    # each run of seqs.
    assert chunks == 3 + 2 + 2
    expected = [
        (host, message)
        for _, host, message in sorted(
            [(stamp, "algo-1", message) for stamp, _, message in slow]
            + [(stamp, "algo-2", message) for stamp, _, message in wide]
        )
    ] + [("algo-2", f"skip {seq}") for seq in (48, 50, 51)]
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        answer = api.get("/v1/training-jobs/job-1/logs", params=params).json()
        seen += answer["events"]
        if (cursor := answer["next_cursor"]) is None:
            break
    assert [(e["host"], e["message"]) for e in seen] == expected
    one_host = api.get("/v1/training-jobs/job-1/logs", params={"host": "algo-1"}).json()
    assert [e["message"] for e in one_host["events"]] == [message for _, _, message in slow]


@pytest.mark.parametrize(
    ("batch", "field"),
    [
        ({"rows": [[1.0, "stdout", "no first_seq"]]}, "body"),
        ({"first_seq": 1, "rows": [], "lines": []}, "body"),
        ({"first_seq": 0, "rows": [[1.0, "stdout", "x"]]}, "first_seq"),
        ({"first_seq": 1, "rows": [[-1.0, "stdout", "before 1970"]]}, "rows.0.0"),
        ({"first_seq": 1, "rows": [[1e12, "stdout", "after 9999"]]}, "rows.0.0"),
        # A number only: the body is stored as it came.
        ({"first_seq": 1, "rows": [["1700000000.5", "stdout", "a string"]]}, "rows.0.0"),
        ({"first_seq": 1, "rows": [[True, "stdout", "a boolean"]]}, "rows.0.0"),
        ({"first_seq": 1, "rows": [[1.0, "stdin", "x"]]}, "rows.0.1"),
        ({"first_seq": 1, "rows": [[1.0, "stdout"]]}, "rows.0.2"),
        ({"first_seq": 1, "rows": [[1.0, "stdout", "x" * 16_385]]}, "rows.0.2"),
        (
            {
                "lines": [
                    {
                        "seq": 1,
                        "time": "2026-01-01T00:00:00",
                        "stream": "stdout",
                        "message": "naive",
                    }
                ]
            },
            "lines.0.time",
        ),
    ],
)
def test_a_bad_batch_is_refused_naming_the_field(
    api: TestClient, settings: Settings, source_dir: Path, batch: dict[str, object], field: str
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    response = api.post(url, json=batch, headers=headers)
    assert response.status_code == 422, response.text
    locations = [".".join(map(str, error["loc"])) for error in response.json()["detail"]]
    assert f"body.{field}".removesuffix(".body") in locations, locations
    assert api.get("/v1/training-jobs/job-1/logs").json()["events"] == []


def test_a_packed_time_that_is_not_a_number_is_refused(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = {
        **submit_for_instances(api, settings, source_dir),
        "Content-Type": "application/json",
    }
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    for stamp in ("NaN", "Infinity"):
        body = f'{{"first_seq": 1, "rows": [[{stamp}, "stdout", "x"]]}}'
        response = api.post(url, content=body, headers=headers)
        assert response.status_code == 422, (stamp, response.text)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_batch_finds_the_hosts_last_line_without_reading_the_others(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    # A new job's lines are newer than PostgreSQL's statistics: a query it plans for one
    # row must still read one row, not every line the host has shipped.
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    for first in range(1, 40_001, 5000):
        rows = [[1.0 + n, "stdout", f"line {n}"] for n in range(first, first + 5000)]
        api.post(url, json={"first_seq": first, "rows": rows}, headers=headers)
    statements: list[tuple[str, Any]] = []

    def keep(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().startswith("SELECT") and "log_chunks" in statement:
            statements.append((statement, parameters))

    engine = get_engine(settings.database_url)
    event.listen(engine, "before_cursor_execute", keep)
    try:
        batch = {"first_seq": 40_001, "rows": [[50_000.0, "stdout", "last"]]}
        assert api.post(url, json=batch, headers=headers).json() == {"stored": 1}
    finally:
        event.remove(engine, "before_cursor_execute", keep)
    assert statements
    with engine.connect() as connection:
        for statement, parameters in statements:
            plan = connection.exec_driver_sql(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", parameters
            ).scalar_one()
            assert _rows_read(plan[0]["Plan"]) <= 2, (statement, plan)


def _rows_read(node: dict[str, Any]) -> int:
    """The most rows any scan in a query plan returned."""
    own = node["Actual Rows"] if "Scan" in node["Node Type"] else 0
    return max([own, *(_rows_read(child) for child in node.get("Plans", []))])


def test_logs_merge_hosts_by_time_and_filter_by_host(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir, instance_count=2)
    base = "/v1/training-jobs/job-1/instances"
    api.post(
        f"{base}/algo-2/logs",
        json={"lines": [log_line(1, 1, "b1"), log_line(2, 3, "b2")]},
        headers=headers.of("algo-2"),
    )
    api.post(
        f"{base}/algo-1/logs",
        json={"lines": [log_line(1, 0, "a1"), log_line(2, 2, "a2", "stderr")]},
        headers=headers,
    )

    merged = api.get("/v1/training-jobs/job-1/logs").json()["events"]
    assert [(e["host"], e["message"]) for e in merged] == [
        ("algo-1", "a1"),
        ("algo-2", "b1"),
        ("algo-1", "a2"),
        ("algo-2", "b2"),
    ]
    assert merged[2]["stream"] == "stderr"
    only_two = api.get("/v1/training-jobs/job-1/logs", params={"host": "algo-2"}).json()["events"]
    assert [e["message"] for e in only_two] == ["b1", "b2"]

    first = api.get("/v1/training-jobs/job-1/logs", params={"limit": 3}).json()
    rest = api.get("/v1/training-jobs/job-1/logs", params={"cursor": first["next_cursor"]}).json()
    assert [e["message"] for e in first["events"] + rest["events"]] == ["a1", "b1", "a2", "b2"]
    assert rest["next_cursor"] is None
    # A cursor from another listing is refused, not misread.
    api.post("/v1/training-jobs", json=job_spec(source_dir, name="job-2"))
    other = api.get("/v1/training-jobs", params={"limit": 1}).json()["next_cursor"]
    assert other is not None
    refused = api.get("/v1/training-jobs/job-1/logs", params={"cursor": other})
    assert refused.status_code == 422


@pytest.mark.parametrize("follow", [False, True], ids=["page", "follow"])
def test_a_host_the_job_does_not_have_is_refused_by_name(
    api: TestClient, settings: Settings, source_dir: Path, follow: bool
) -> None:
    headers = submit_for_instances(api, settings, source_dir, instance_count=2)
    lines = {"lines": [log_line(1, 0, "a1")]}
    api.post("/v1/training-jobs/job-1/instances/algo-1/logs", json=lines, headers=headers)
    # Ended, so that a stream that is not refused ends too, rather than wait for lines.
    with session_scope(settings.database_url) as session:
        session.scalars(select(TrainingJob)).one().status = "Completed"
    params = {"host": "algo-7", **({"follow": "true"} if follow else {})}
    response = api.get("/v1/training-jobs/job-1/logs", params=params)
    assert response.status_code == 404, response.text
    assert response.json()["detail"] == (
        "training job 'job-1' has no host 'algo-7'; its hosts are algo-1, algo-2"
    )


def test_follow_streams_events_then_ends_with_the_job(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    api.post(
        "/v1/training-jobs/job-1/instances/algo-1/logs",
        json={"lines": [log_line(1, 0, "first"), log_line(2, 1, "second")]},
        headers=headers,
    )
    with session_scope(settings.database_url) as session:
        session.scalars(select(TrainingJob)).one().status = "Completed"

    with api.stream("GET", "/v1/training-jobs/job-1/logs", params={"follow": "true"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = "".join(response.iter_text())
    events = [block for block in body.split("\n\n") if block.strip()]
    logs = [json.loads(e.split("data: ", 1)[1]) for e in events if "event: log" in e]
    assert [line["message"] for line in logs] == ["first", "second"]
    assert events[-1].startswith("event: end")
    assert '"Completed"' in events[-1]

    # Resuming after the first line sends only what came after it.
    first_id = next(e for e in events if "event: log" in e).split("\n")[0].removeprefix("id: ")
    assert first_id == "algo-1:1"
    resume = {"Last-Event-ID": first_id}
    with api.stream(
        "GET", "/v1/training-jobs/job-1/logs", params={"follow": "true"}, headers=resume
    ) as response:
        body = "".join(response.iter_text())
    assert "second" in body
    assert "first" not in body


def test_a_followed_stream_ends_once_its_token_is_revoked(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follow, "CREDENTIALS_RECHECK_SECONDS", 0.2)
    submit_for_instances(api, settings, source_dir)
    token = api.post("/v1/tokens", json={"name": "watcher", "role": "viewer"}).json()["token"]
    watcher = {"Authorization": f"Bearer {token}"}

    def revoke_soon() -> None:
        time.sleep(0.5)
        assert api.delete("/v1/tokens/watcher").status_code == 204

    revoker = threading.Thread(target=revoke_soon)
    revoker.start()
    started = time.monotonic()
    with api.stream(
        "GET", "/v1/training-jobs/job-1/logs", params={"follow": "true"}, headers=watcher
    ) as response:
        assert response.status_code == 200
        body = "".join(response.iter_text())
    revoker.join()
    # The job is still running: the stream ended for the token, not with an end event.
    assert "event: end" not in body
    assert time.monotonic() - started < 10
    again = api.get("/v1/training-jobs/job-1/logs", params={"follow": "true"}, headers=watcher)
    assert again.status_code == 401


@pytest.mark.parametrize(
    ("batch", "field"),
    [
        ({"first_seq": 10**30, "rows": [[1.0, "stdout", "x"]]}, "first_seq"),
        ({"first_seq": 2**31 - 2, "rows": [[1.0, "stdout", "x"]]}, "first_seq"),
        (
            {
                "lines": [
                    {
                        "seq": 2**40,
                        "time": "2026-01-01T00:00:00Z",
                        "stream": "stdout",
                        "message": "x",
                    }
                ]
            },
            "seq",
        ),
    ],
)
def test_line_numbers_past_what_the_database_holds_are_refused_by_name(
    api: TestClient, settings: Settings, source_dir: Path, batch: dict[str, Any], field: str
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    response = api.post(
        "/v1/training-jobs/job-1/instances/algo-1/logs", json=batch, headers=headers
    )
    assert response.status_code == 422, response.text
    assert field in {str(part) for error in response.json()["detail"] for part in error["loc"]}


def test_phase_reports_are_recorded_and_final_ones_stick(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/status"
    for body in (
        {"phase": "Downloading", "time": "2026-01-01T00:00:00Z"},
        {"phase": "Training", "time": "2026-01-01T00:00:01Z"},
        {
            "phase": "Failed",
            "time": "2026-01-01T00:00:05Z",
            "exit_code": 3,
            "failure_reason": "x" * 2000,
        },
        {"phase": "Completed", "time": "2026-01-01T00:00:06Z", "exit_code": 0},
    ):
        assert api.post(url, json=body, headers=headers).status_code == 204
    with session_scope(settings.database_url) as session:
        row = session.scalars(select(JobInstance)).one()
        assert (row.phase, row.exit_code) == ("Failed", 3)
        assert row.failure_reason is not None
        assert len(row.failure_reason) == 1024
        # As SageMaker's training time: from the instance's start (its first report,
        # before the downloads) to its result.
        assert row.training_started_at is not None
        assert row.training_started_at.second == 0
        assert row.training_ended_at is not None
        assert row.training_ended_at.second == 5


def test_bad_report_is_refused(api: TestClient, settings: Settings, source_dir: Path) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/status"
    assert (
        api.post(
            url, json={"phase": "Dancing", "time": "2026-01-01T00:00:00Z"}, headers=headers
        ).status_code
        == 422
    )
    lines = {"lines": [log_line(0, 0, "seq must start at one")]}
    assert (
        api.post(
            "/v1/training-jobs/job-1/instances/algo-1/logs", json=lines, headers=headers
        ).status_code
        == 422
    )


def test_a_nul_an_instance_sends_is_stored_replaced(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    # PostgreSQL's text cannot hold a NUL; a script may still print one.
    headers = submit_for_instances(api, settings, source_dir)
    base = "/v1/training-jobs/job-1/instances/algo-1"
    stored = api.post(f"{base}/logs", json={"lines": [log_line(1, 0, "a\x00b")]}, headers=headers)
    assert stored.json() == {"stored": 1}
    report = {
        "phase": "Failed",
        "time": "2026-01-01T00:00:01Z",
        "message": "ended\x00",
        "exit_code": 1,
        "failure_reason": "AlgorithmError: \x00",
    }
    assert api.post(f"{base}/status", json=report, headers=headers).status_code == 204
    events = api.get("/v1/training-jobs/job-1/logs").json()["events"]
    assert [e["message"] for e in events] == ["a\ufffdb"]
    with session_scope(settings.database_url) as session:
        row = session.scalars(select(JobInstance)).one()
        assert (row.message, row.failure_reason) == ("ended\ufffd", "AlgorithmError: \ufffd")


def test_a_cursor_at_the_earliest_time_a_cursor_holds_reads_from_there(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    """A read looks for chunks from a chunk's span before its cursor: a cursor at the
    start of year 1 (one a client may write) reads from the earliest time there is."""
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    assert api.post(url, json={"lines": [log_line(1, 0, "one")]}, headers=headers).json() == {
        "stored": 1
    }
    cursor = encode_cursor(datetime(1, 1, 1, 0, 0, 10, tzinfo=UTC), 1)
    answer = api.get("/v1/training-jobs/job-1/logs", params={"cursor": cursor})
    assert answer.status_code == 200, answer.text
    assert [e["message"] for e in answer.json()["events"]] == ["one"]
