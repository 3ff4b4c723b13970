"""A page of jobs reads a bounded number of rows and never their records, however large
the records are and however many jobs a filter passes over: filters that the order's
index does not answer are tested on a window of jobs, and a page that found few answers a
cursor to go on from. Paged through, the list still gives every job it matches once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.kit import scan
from service.settings import Settings
from tests.conftest import job_spec
from tests.service.bounded import LARGE_ENVIRONMENT, LARGE_HYPERPARAMETERS, reads_of_jobs

JOBS = 30
# Every fifth job carries the tag a filter looks for.
TAGGED = [f"big-{n:02d}" for n in range(JOBS) if n % 5 == 0]
WINDOW = 8


@pytest.fixture
def large_jobs(api: TestClient, source_dir: Path) -> None:
    for n in range(JOBS):
        tags = [{"key": "sweep", "value": "7"}] if n % 5 == 0 else []
        spec = job_spec(
            source_dir,
            name=f"big-{n:02d}",
            hyperparameters=LARGE_HYPERPARAMETERS,
            environment=LARGE_ENVIRONMENT,
            tags=tags,
        )
        response = api.post("/v1/training-jobs", json=spec)
        assert response.status_code == 201, response.text


def pages(api: TestClient, **params: Any) -> list[list[str]]:
    """The names on each page the list gives for ``params``, followed to its end."""
    found: list[list[str]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = api.get("/v1/training-jobs", params=query)
        assert response.status_code == 200, response.text
        found.append([item["name"] for item in response.json()["items"]])
        if (cursor := response.json()["next_cursor"]) is None:
            return found


@pytest.mark.usefixtures("large_jobs")
def test_a_page_of_large_jobs_reads_their_columns_never_their_records(
    api: TestClient, settings: Settings
) -> None:
    with reads_of_jobs(settings.database_url) as reads:
        answer = api.get("/v1/training-jobs", params={"limit": 10, "sort": "name"}).json()
    assert [item["name"] for item in answer["items"]] == [f"big-{n:02d}" for n in range(10)]
    assert answer["items"][0]["instance_type"] == "local"
    assert answer["items"][0]["instance_count"] == 1
    assert answer["next_cursor"] is not None
    assert reads, "the page read no jobs"
    assert not any(read.records for read in reads)
    assert all(read.most_rows is not None and read.most_rows <= 11 for read in reads)


@pytest.mark.usefixtures("large_jobs")
def test_a_filter_no_index_answers_looks_at_a_window_of_jobs_per_page(
    api: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "SCAN_ROWS", WINDOW)
    with reads_of_jobs(settings.database_url) as reads:
        found = pages(api, tag="sweep=7", sort="name", limit=5)
    # Each page looked at WINDOW jobs at most, found what it could, and said where to go on.
    assert [name for page in found for name in page] == TAGGED
    assert len(found) == -(-JOBS // WINDOW)
    assert not any(read.records for read in reads)
    assert all(read.most_rows is not None and read.most_rows <= WINDOW + 1 for read in reads)

    # A page fills before its window ends: it ends at its last job, and the next goes on.
    monkeypatch.setattr(scan, "SCAN_ROWS", 1000)
    assert pages(api, tag="sweep=7", sort="name", limit=2) == [TAGGED[:2], TAGGED[2:4], TAGGED[4:]]
    assert pages(api, name_contains="-1", limit=4) == [
        ["big-19", "big-18", "big-17", "big-16"],
        ["big-15", "big-14", "big-13", "big-12"],
        ["big-11", "big-10"],
    ]
