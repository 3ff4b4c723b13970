"""The list of jobs: a part of a name, a creation window, tags, and its orders, each read
page by page; what a client gets wrong is a 422 naming the parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.jobs.models import TrainingJob
from service.kit.db import session_scope
from service.settings import Settings
from tests.conftest import job_spec

START = datetime(2026, 3, 1, tzinfo=UTC)
# Created an hour apart, in this order; the tags each was submitted with.
JOBS: dict[str, list[dict[str, str]]] = {
    "resnet-base": [{"key": "team", "value": "vision"}],
    "bert-large": [{"key": "team", "value": "nlp"}, {"key": "sweep", "value": "7"}],
    "ResNet-wide": [{"key": "team", "value": "vision"}, {"key": "sweep", "value": "7"}],
    "gpt-tiny": [],
    "resnet-50": [{"key": "team", "value": "vision%"}],
}


@pytest.fixture
def listed(api: TestClient, settings: Settings, source_dir: Path) -> None:
    for hour, (name, tags) in enumerate(JOBS.items()):
        # Tags as Runyard lists them, as SageMaker does ([{Key, Value}]), or as a mapping.
        written: Any = tags
        if hour % 3 == 1:
            written = [{"Key": tag["key"], "Value": tag["value"]} for tag in tags]
        elif hour % 3 == 2:
            written = {tag["key"]: tag["value"] for tag in tags}
        response = api.post("/v1/training-jobs", json=job_spec(source_dir, name=name, tags=written))
        assert response.status_code == 201, response.text
        with session_scope(settings.database_url) as session:
            session.execute(
                update(TrainingJob)
                .where(TrainingJob.name == name)
                .values(created_at=START + timedelta(hours=hour))
            )


def _names(api: TestClient, **params: Any) -> list[str]:
    """Every job the list gives for ``params``, two to a page."""
    names: list[str] = []
    cursor = None
    while True:
        query = {**params, "limit": 2, **({"cursor": cursor} if cursor else {})}
        response = api.get("/v1/training-jobs", params=query)
        assert response.status_code == 200, response.text
        names += [item["name"] for item in response.json()["items"]]
        cursor = response.json()["next_cursor"]
        if cursor is None:
            return names


@pytest.mark.usefixtures("listed")
def test_each_order_reads_every_job_once_across_pages(api: TestClient) -> None:
    created = list(JOBS)
    assert _names(api) == list(reversed(created))
    assert _names(api, sort="-created_at") == list(reversed(created))
    assert _names(api, sort="created_at") == created
    by_name = sorted(created)
    assert _names(api, sort="name") == by_name
    assert _names(api, sort="-name") == list(reversed(by_name))


@pytest.mark.usefixtures("listed")
def test_a_name_contains_filter_ignores_case_and_wildcards(api: TestClient) -> None:
    assert _names(api, name_contains="resnet", sort="created_at") == [
        "resnet-base",
        "ResNet-wide",
        "resnet-50",
    ]
    assert _names(api, name_contains="NET-", sort="created_at") == [
        "resnet-base",
        "ResNet-wide",
        "resnet-50",
    ]
    assert _names(api, name_contains="t-5") == ["resnet-50"]
    # SQL's wildcards are plain characters.
    assert _names(api, name_contains="t_5") == []
    assert _names(api, name_contains="%") == []


@pytest.mark.usefixtures("listed")
def test_a_creation_window_holds_its_start_not_its_end(api: TestClient) -> None:
    window = {
        "created_after": (START + timedelta(hours=1)).isoformat(),
        "created_before": (START + timedelta(hours=3)).isoformat(),
        "sort": "created_at",
    }
    assert _names(api, **window) == ["bert-large", "ResNet-wide"]
    assert _names(api, created_after=(START + timedelta(hours=4)).isoformat()) == ["resnet-50"]


@pytest.mark.usefixtures("listed")
def test_tag_filters_match_a_key_or_a_key_and_value_and_all_of_them(api: TestClient) -> None:
    assert _names(api, tag="sweep", sort="created_at") == ["bert-large", "ResNet-wide"]
    assert _names(api, tag="team=vision", sort="created_at") == ["resnet-base", "ResNet-wide"]
    assert _names(api, tag=["team=vision", "sweep=7"]) == ["ResNet-wide"]
    assert _names(api, tag="team=vision%") == ["resnet-50"]
    assert _names(api, tag="team=") == []
    assert _names(api, tag="owner") == []


@pytest.mark.usefixtures("listed")
def test_filters_and_orders_combine(api: TestClient) -> None:
    assert _names(api, name_contains="resnet", tag="team=vision", sort="-name") == [
        "resnet-base",
        "ResNet-wide",
    ]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"sort": "status"}, "sort"),
        ({"sort": "created_at; drop table"}, "sort"),
        ({"created_after": "yesterday"}, "created_after"),
        # A time without its zone could mean any of them.
        ({"created_before": "2026-03-01T00:00:00"}, "created_before"),
        (
            {"created_after": "2026-03-02T00:00:00Z", "created_before": "2026-03-01T00:00:00Z"},
            "created_before",
        ),
        ({"tag": "=vision"}, "tag"),
        ({"tag": ["a", "b", "c", "d", "e", "f"]}, "tag"),
        ({"tag": "k" * 400}, "tag"),
        ({"name_contains": "a\x00b"}, "name_contains"),
        ({"name_contains": "x" * 64}, "name_contains"),
    ],
)
def test_a_bad_filter_is_a_422_that_names_it(
    api: TestClient, params: dict[str, Any], field: str
) -> None:
    response = api.get("/v1/training-jobs", params=params)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][:2] == ["query", field]


@pytest.mark.usefixtures("listed")
def test_a_cursor_holds_to_the_order_it_was_issued_for(api: TestClient) -> None:
    cursor = api.get("/v1/training-jobs", params={"limit": 1, "sort": "name"}).json()["next_cursor"]
    assert cursor is not None
    response = api.get("/v1/training-jobs", params={"cursor": cursor, "sort": "created_at"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "cursor"]
    assert "'name' order" in response.json()["detail"][0]["msg"]
