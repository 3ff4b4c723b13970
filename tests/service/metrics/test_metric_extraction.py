"""Metric extraction after lines are stored: by the cursor each host has, once per line
whoever searches, and within a CPU budget that stops a host whose lines cost too much."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.jobs.models import (
    JobFinalMetric,
    MetricCursor,
    MetricPoint,
    MetricRollup,
    TrainingJob,
)
from service.kit.db import session_scope, to_micros, utcnow
from service.logs import service as logs
from service.logs.schemas import Line
from service.metrics import extraction, service
from service.settings import Settings
from tests.conftest import job_spec, submit_for_instances

LOSS = [{"name": "loss", "regex": r"loss=([0-9.]+)"}]


def _job(api: TestClient, settings: Settings, source_dir: Path, **spec: Any) -> str:
    submit_for_instances(api, settings, source_dir, **spec)
    return str(api.get("/v1/training-jobs/job-1").json()["id"])


def _store(settings: Settings, job_id: str, *messages: str, first: int = 1) -> None:
    """Lines stored as a batch is, without the request that would search them."""
    now = to_micros(utcnow())
    lines = [Line(seq, now, "stdout", text) for seq, text in enumerate(messages, start=first)]
    with session_scope(settings.database_url) as session:
        logs.ingest(session, job_id, "algo-1", lines)


def _points(settings: Settings, job_id: str) -> list[tuple[int, float]]:
    with session_scope(settings.database_url, readonly=True) as session:
        rows = session.execute(
            select(MetricPoint.seq, MetricPoint.value)
            .where(MetricPoint.job_id == job_id)
            .order_by(MetricPoint.seq)
        )
        return [(seq, value) for seq, value in rows]


def _cursor(settings: Settings, job_id: str) -> MetricCursor | None:
    with session_scope(settings.database_url, readonly=True) as session:
        cursor = session.get(MetricCursor, (job_id, "algo-1"))
        if cursor is not None:
            session.expunge(cursor)
        return cursor


def test_storing_lines_searches_nothing_and_a_search_takes_each_line_once(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    job_id = _job(api, settings, source_dir, metric_definitions=LOSS)
    _store(settings, job_id, "loss=3", "noise", "loss=2")
    assert _points(settings, job_id) == []
    extraction.extract_pending(settings.database_url, job_id, "algo-1")
    extraction.extract_pending(settings.database_url, job_id, "algo-1")
    assert _points(settings, job_id) == [(1, 3.0), (3, 2.0)]
    _store(settings, job_id, "loss=1", first=4)
    extraction.extract_pending(settings.database_url, job_id, "algo-1")
    assert _points(settings, job_id) == [(1, 3.0), (3, 2.0), (4, 1.0)]
    cursor = _cursor(settings, job_id)
    assert cursor is not None
    assert (cursor.seq, cursor.stopped) == (4, None)


def test_a_batch_posted_is_searched_after_it_is_answered(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir, metric_definitions=LOSS)
    rows = [[1767225600.0, "stdout", "loss=0.5"]]
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    answer = api.post(url, json={"first_seq": 1, "rows": rows}, headers=headers)
    assert answer.status_code == 200, answer.text
    # The test client runs a request's background tasks before it returns.
    metrics = api.get("/v1/training-jobs/job-1/metrics").json()
    assert [point["value"] for point in metrics["metrics"][0]["points"]] == [0.5]


def test_lines_another_process_searched_meanwhile_are_not_stored_twice(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _job(api, settings, source_dir, metric_definitions=LOSS)
    _store(settings, job_id, "loss=3", "loss=2")
    real_find = service.find
    raced = []

    def find_while_another_process_searches(*args: Any, **kwargs: Any) -> service.Found:
        if not raced:  # another API process (or the worker) takes the same lines first
            raced.append(True)
            assert extraction._round(settings.database_url, job_id, "algo-1") is False
        return real_find(*args, **kwargs)

    monkeypatch.setattr(service, "find", find_while_another_process_searches)
    extraction.extract_pending(settings.database_url, job_id, "algo-1")
    assert raced
    assert _points(settings, job_id) == [(1, 3.0), (2, 2.0)]
    with session_scope(settings.database_url, readonly=True) as session:
        count = session.scalar(select(func.count()).select_from(JobFinalMetric))
    assert count == 1


# A small program that RE2's DFA cannot hold for a line of random a's and b's (it would
# need a state for each of 2**60 suffixes): a few milliseconds for every 16 KiB line.
COSTLY = [{"name": f"m{n}", "regex": r"[ab]*a[ab]{60}c(\d)"} for n in range(3)]
_RANDOM = random.Random(1)
RANDOM_AB = "".join(_RANDOM.choice("ab") for _ in range(16_000))


def test_a_host_whose_lines_cost_more_than_the_budget_is_searched_no_further(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    job_id = _job(api, settings, source_dir, metric_definitions=COSTLY)
    _store(settings, job_id, *[RANDOM_AB] * 200, "a" + "b" * 60 + "c7")
    extraction.extract_pending(settings.database_url, job_id, "algo-1", cpu_budget=0.02)
    cursor = _cursor(settings, job_id)
    assert cursor is not None
    assert cursor.stopped is not None
    assert 0 <= cursor.seq < 200
    assert f"after line {cursor.seq} of algo-1" in cursor.stopped
    # Later lines, the one with a value among them, are not searched, now or later.
    extraction.extract_pending(settings.database_url, job_id, "algo-1")
    assert _points(settings, job_id) == []
    with session_scope(settings.database_url, readonly=True) as session:
        assert extraction.stopped_hosts(session, job_id) == {"algo-1": cursor.stopped}


def test_a_round_over_its_budget_on_plain_patterns_goes_on_where_it_ended(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    """A budget spent on lines that cost what lines cost (a backlog, a busy machine)
    ends the round, not the host's search."""
    job_id = _job(api, settings, source_dir, metric_definitions=LOSS)
    _store(settings, job_id, *[f"step {n} loss={n}" for n in range(1, 3001)])
    extraction.extract_pending(settings.database_url, job_id, "algo-1", cpu_budget=0.001)
    assert _points(settings, job_id) == [(n, float(n)) for n in range(1, 3001)]
    cursor = _cursor(settings, job_id)
    assert cursor is not None
    assert (cursor.seq, cursor.stopped) == (3000, None)


def test_a_round_searches_one_line_whole_before_its_budget_counts(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    job_id = _job(api, settings, source_dir, metric_definitions=COSTLY)
    _store(settings, job_id, "noise")
    extraction.extract_pending(settings.database_url, job_id, "algo-1")
    _store(settings, job_id, RANDOM_AB, first=2)
    extraction.extract_pending(settings.database_url, job_id, "algo-1", cpu_budget=1e-9)
    cursor = _cursor(settings, job_id)
    assert cursor is not None
    # The round's one costly line was searched (no round ends before its first line is,
    # nor moves the cursor back), and its cost stopped the host.
    assert cursor.seq == 2
    assert cursor.stopped is not None


def test_points_a_server_of_before_cursors_stored_are_kept_once(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    """During a rolling upgrade an API process of before stores a batch's points itself,
    past the cursor the migration gave the host."""
    job_id = _job(api, settings, source_dir, metric_definitions=LOSS)
    _store(settings, job_id, "loss=3", "loss=2")
    with session_scope(settings.database_url) as session:
        job = session.get(TrainingJob, job_id)
        assert job is not None
        lines = [Line(2, to_micros(utcnow()), "stdout", "loss=2")]
        found = service.find(job_id, "algo-1", service.definitions(job.record), lines, 1.0)
        service.store(session, found.points)
    extraction.extract_pending(settings.database_url, job_id, "algo-1")
    assert _points(settings, job_id) == [(1, 3.0), (2, 2.0)]
    with session_scope(settings.database_url, readonly=True) as session:
        counted = session.scalar(select(func.sum(MetricRollup.count)))
    assert counted == 2


def test_a_batch_whose_host_is_being_searched_asks_that_search_to_look_again(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No thread waits for another's search: the one under way looks again."""
    job_id = _job(api, settings, source_dir, metric_definitions=LOSS)
    _store(settings, job_id, "loss=1")
    real_round, rounds = extraction._round, []

    def round_while_a_batch_arrives(*args: Any) -> bool:
        if not rounds:  # the next batch lands, and its background task starts
            _store(settings, job_id, "loss=2", first=2)
            extraction.extract_pending(settings.database_url, job_id, "algo-1")
        rounds.append(True)
        return real_round(*args)

    monkeypatch.setattr(extraction, "_round", round_while_a_batch_arrives)
    extraction.extract_pending(settings.database_url, job_id, "algo-1")
    assert _points(settings, job_id) == [(1, 1.0), (2, 2.0)]
    assert extraction._searching == {}


def test_a_search_that_fails_after_the_answer_is_logged_naming_the_job(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job_id = _job(api, settings, source_dir, metric_definitions=LOSS)

    def failing(*_args: Any) -> bool:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(extraction, "_round", failing)
    extraction.extract_after_answer(settings.database_url, job_id, "algo-1")
    assert f"job {job_id}, host algo-1" in caplog.text
    assert extraction._searching == {}


def test_the_same_lines_within_the_budget_are_searched_whole(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    job_id = _job(api, settings, source_dir, metric_definitions=COSTLY)
    _store(settings, job_id, *[RANDOM_AB] * 20, "a" + "b" * 60 + "c7")
    extraction.extract_pending(settings.database_url, job_id, "algo-1")
    assert _points(settings, job_id) == [(21, 7.0)] * 3


def test_a_pattern_whose_program_is_too_large_is_refused_naming_it(
    api: TestClient, source_dir: Path
) -> None:
    nested = [*LOSS, {"name": "bomb", "regex": r"(?:a{1,40}){1,25}b(\d+)"}]
    answer = api.post("/v1/training-jobs", json=job_spec(source_dir, metric_definitions=nested))
    assert answer.status_code == 422
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["body", "metric_definitions", 1, "regex"]
    assert "program has 2008 instructions, at most 2000" in detail["msg"]
