"""ListTrainingJobs and Search over many jobs with large records: each request reads a
bounded number of rows, never records it does not answer with, and stops at its budget
with a NextToken, from which the next request goes on; paged through, every job that
matches comes once, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.kit import scan
from service.settings import Settings
from tests.service.bounded import LARGE_ENVIRONMENT, LARGE_HYPERPARAMETERS, reads_of_jobs
from tests.service.sagemaker.test_training_jobs import request

JOBS = 30
NAMES = [f"big-{n:02d}" for n in range(JOBS)]
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
    stopped = [name for n, name in enumerate(NAMES) if n % 5 == 0]
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
