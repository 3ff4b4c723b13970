"""ListTrainingJobs and Search over many jobs with large records: each request reads a
bounded number of rows, never records it does not answer with, and stops at its budget
with a NextToken, from which the next request goes on; paged through, every job that
matches comes once, in order."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sqlalchemy import select

from service.jobs.models import JobFinalMetric, TrainingJob
from service.kit import scan
from service.kit.db import session_scope
from service.sagemaker import search
from service.settings import Settings
from tests.service.bounded import LARGE_ENVIRONMENT, LARGE_HYPERPARAMETERS, Read, reads_of_jobs
from tests.service.sagemaker.live import check_answer
from tests.service.sagemaker.test_training_jobs import request

JOBS = 30
NAMES = [f"big-{n:02d}" for n in range(JOBS)]
STOPPED = [name for n, name in enumerate(NAMES) if n % 5 == 0]
WINDOW = 8


@pytest.fixture
def large_jobs(sm: Any, source_dir: Path) -> None:
    """JOBS jobs made in name order, each with about 130 KB of hyperparameters and
    environment; every fifth tagged sweep=7 and stopped."""
    for n, name in enumerate(NAMES):
        body = request(source_dir, name=name, Environment=LARGE_ENVIRONMENT)
        body["HyperParameters"].update(LARGE_HYPERPARAMETERS)
        if n % 5 == 0:
            body["Tags"] = [{"Key": "sweep", "Value": "7"}]
        sm.create_training_job(**body)
        if n % 5 == 0:
            sm.stop_training_job(TrainingJobName=name)


def listed(sm: Any, **params: Any) -> list[list[str]]:
    """The names on each page ListTrainingJobs gives, followed to its end."""
    found: list[list[str]] = []
    more: dict[str, str] = {}
    while True:
        answer = sm.list_training_jobs(**params, **more)
        found.append([summary["TrainingJobName"] for summary in answer["TrainingJobSummaries"]])
        if "NextToken" not in answer:
            return found
        more = {"NextToken": answer["NextToken"]}


@pytest.mark.usefixtures("large_jobs")
def test_list_training_jobs_reads_columns_of_a_page_of_jobs(sm: Any, settings: Settings) -> None:
    with reads_of_jobs(settings.database_url) as reads:
        answer = sm.list_training_jobs(MaxResults=10, SortBy="Name")
    summaries = answer["TrainingJobSummaries"]
    assert [summary["TrainingJobName"] for summary in summaries] == NAMES[:10]
    assert summaries[0]["TrainingJobArn"].startswith("arn:aws:sagemaker:eu-west-1:")
    assert "NextToken" in answer
    assert reads, "the page read no jobs"
    assert not any(read.records for read in reads)
    assert all(read.most_rows is not None and read.most_rows <= 11 for read in reads)


@pytest.mark.usefixtures("large_jobs")
def test_list_training_jobs_tests_other_filters_on_a_window_per_page(
    sm: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "SCAN_ROWS", WINDOW)
    stopped = STOPPED
    with reads_of_jobs(settings.database_url) as reads:
        by_name = listed(sm, SortBy="Name", StatusEquals="Stopped", MaxResults=100)
        contains = listed(sm, NameContains="-1", MaxResults=100)
    assert [name for page in by_name for name in page] == stopped
    assert len(by_name) == -(-JOBS // WINDOW)
    assert [name for page in contains for name in page] == NAMES[10:20]
    assert not any(read.records for read in reads)
    assert all(read.most_rows is not None and read.most_rows <= WINDOW + 1 for read in reads)
    # By status, the index answers the status: the pages are full.
    assert listed(sm, SortBy="Status", StatusEquals="Stopped", MaxResults=4) == [
        stopped[:4],
        stopped[4:],
    ]


# -- Search ----------------------------------------------------------------------------


def searched(sm: Any, **params: Any) -> tuple[list[list[str]], dict[str, Any]]:
    """The names on each page Search gives, followed to its end, and its last answer."""
    found: list[list[str]] = []
    more: dict[str, str] = {}
    while True:
        answer = sm.search(Resource="TrainingJob", **params, **more)
        check_answer(sm, "Search", answer)
        found.append([r["TrainingJob"]["TrainingJobName"] for r in answer["Results"]])
        if "NextToken" not in answer:
            return found, answer
        more = {"NextToken": answer["NextToken"]}


def record_rows(reads: list[Read]) -> int:
    """How many records (whole specs and requests) the reads could return."""
    return sum(read.most_rows or 10**9 for read in reads if read.records)


@pytest.mark.usefixtures("large_jobs")
def test_search_reads_columns_to_walk_and_records_only_for_its_page(
    sm: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At its budget of record bytes, a page of these large jobs stops short of 10.
    answer = sm.search(Resource="TrainingJob", MaxResults=10)
    assert 0 < len(answer["Results"]) < 10
    assert "NextToken" in answer
    monkeypatch.setattr(search, "MAX_RECORD_BYTES", 100 * 1024 * 1024)
    with reads_of_jobs(settings.database_url) as reads:
        answer = sm.search(Resource="TrainingJob", MaxResults=10)
    check_answer(sm, "Search", answer)
    # The last modified first (each was stopped, if at all, before the next was made).
    names = [r["TrainingJob"]["TrainingJobName"] for r in answer["Results"]]
    assert names == NAMES[::-1][:10]
    assert answer["Results"][0]["TrainingJob"]["HyperParameters"]["hp_000"] == "h" * 1000
    assert answer["TotalHits"] == {"Value": 11, "Relation": "GreaterThanOrEqualTo"}
    assert "NextToken" in answer
    assert all(read.most_rows is not None for read in reads)
    assert record_rows(reads) <= 10

    # By a name it has, in the columns: only the one record answered is read.
    named = {"Filters": [{"Name": "TrainingJobName", "Operator": "Equals", "Value": "big-17"}]}
    with reads_of_jobs(settings.database_url) as reads:
        pages, last = searched(sm, SearchExpression=named)
    assert pages == [["big-17"]]
    assert last["TotalHits"] == {"Value": 1, "Relation": "EqualTo"}
    assert record_rows(reads) <= 1


@pytest.mark.usefixtures("large_jobs")
def test_search_stops_at_its_budget_and_its_token_goes_on_from_there(
    sm: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tag is in the record: each job looked at is read whole, and a request looks at 7.
    monkeypatch.setattr(search, "MAX_LOOKED_AT", 7)
    monkeypatch.setattr(search, "MAX_RECORD_BYTES", 100 * 1024 * 1024)
    tagged = {"Filters": [{"Name": "Tags.sweep", "Operator": "Equals", "Value": "7"}]}
    with reads_of_jobs(settings.database_url) as reads:
        pages, last = searched(
            sm, SearchExpression=tagged, SortBy="CreationTime", SortOrder="Ascending"
        )
    assert [name for page in pages for name in page] == STOPPED
    assert len(pages) == -(-JOBS // 7)
    assert last["TotalHits"] == {"Value": len(STOPPED), "Relation": "EqualTo"}
    assert all(read.most_rows is not None and read.most_rows <= 8 for read in reads)
    assert record_rows(reads) <= JOBS + len(pages) * 8

    # Records are read up to the budget's bytes, one at least: every job still comes
    # once, in order.
    monkeypatch.setattr(search, "MAX_LOOKED_AT", 500)
    monkeypatch.setattr(search, "MAX_RECORD_BYTES", 1)
    pages, last = searched(sm, SortBy="TrainingJobName", SortOrder="Ascending", MaxResults=20)
    assert [name for page in pages for name in page] == NAMES
    assert max(len(page) for page in pages) == 1
    assert last["TotalHits"] == {"Value": JOBS, "Relation": "EqualTo"}


@pytest.mark.usefixtures("large_jobs")
def test_search_sorts_by_a_final_metric_with_jobs_without_it_last(
    sm: Any, settings: Settings
) -> None:
    with session_scope(settings.database_url) as session:
        jobs = {job.name: job.id for job in session.scalars(select(TrainingJob))}
        when = datetime(2026, 1, 1, tzinfo=UTC)
        for n, name in enumerate(NAMES[:12]):
            loss = (n * 7) % 12
            session.add(
                JobFinalMetric(job_id=jobs[name], name="loss", value=loss, time=when, host="algo-1")
            )
    by_loss = sorted(NAMES[:12], key=lambda name: (NAMES.index(name) * 7) % 12)
    without = sorted(NAMES[12:], key=lambda name: jobs[name])
    pages, _ = searched(sm, SortBy="Metrics.loss", SortOrder="Ascending", MaxResults=5)
    assert [name for page in pages for name in page] == by_loss + without
    pages, _ = searched(sm, SortBy="Metrics.loss", SortOrder="Descending", MaxResults=5)
    assert [name for page in pages for name in page] == by_loss[::-1] + without[::-1]
    low = {"Filters": [{"Name": "Metrics.loss", "Operator": "LessThan", "Value": "3"}]}
    pages, _ = searched(sm, SearchExpression=low, SortBy="Metrics.loss", SortOrder="Ascending")
    assert pages == [by_loss[:3]]


def test_search_refuses_to_sort_by_what_no_index_holds(sm: Any) -> None:
    for sort_by in ("ResourceConfig.InstanceType", "HyperParameters.lr"):
        with pytest.raises(ClientError) as refused:
            sm.search(Resource="TrainingJob", SortBy=sort_by)
        error = refused.value.response["Error"]
        assert error["Code"] == "ValidationException"
        assert error["Message"].startswith("SortBy: training jobs are sorted by CreationTime")
