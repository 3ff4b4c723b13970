"""A metric over a long range: ``max_points`` buckets per host, each with the count, mean,
least and greatest of its points, whether summed from the per-minute rollups (buckets of
a minute or more) or from the points; ``start``/``end`` bound either form."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.settings import Settings
from tests.conftest import InstanceHeaders, submit_for_instances

JOB = "/v1/training-jobs/job-1"
START = datetime(2026, 1, 1, tzinfo=UTC)
BATCH = 500


def _time(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def _ship(
    api: TestClient, headers: InstanceHeaders, host: str, values: list[tuple[int, float]]
) -> None:
    """One point at each (second, value), in batches as a runtime sends them."""
    lines = [
        {
            "seq": seq,
            "time": _time(second).isoformat().replace("+00:00", "Z"),
            "stream": "stdout",
            "message": f"loss: {value}",
        }
        for seq, (second, value) in enumerate(values, 1)
    ]
    for first in range(0, len(lines), BATCH):
        response = api.post(
            f"{JOB}/instances/{host}/logs",
            json={"lines": lines[first : first + BATCH]},
            headers=headers.of(host),
        )
        assert response.status_code == 200, response.text


def _series(api: TestClient, **params: Any) -> dict[str, Any]:
    response = api.get(f"{JOB}/metrics", params={"name": "loss", **params})
    assert response.status_code == 200, response.text
    series: dict[str, Any] = response.json()["metrics"][0]
    return series


def _expected(
    values: dict[str, list[tuple[int, float]]], anchor: float, width: float, buckets: int
) -> list[tuple[float, str, int, float, float, float]]:
    """What each bucket must hold, worked out from the points one by one."""
    found: dict[tuple[int, str], list[float]] = {}
    for host, points in values.items():
        for second, value in points:
            index = min(math.floor((second - anchor) / width), buckets - 1)
            found.setdefault((index, host), []).append(value)
    return [
        (
            anchor + index * width,
            host,
            len(bucket),
            sum(bucket) / len(bucket),
            min(bucket),
            max(bucket),
        )
        for (index, host), bucket in sorted(found.items())
    ]


def _got(series: dict[str, Any]) -> list[tuple[float, str, int, float, float, float]]:
    return [
        (
            (datetime.fromisoformat(point["time"]) - START).total_seconds(),
            point["host"],
            point["count"],
            point["value"],
            point["minimum"],
            point["maximum"],
        )
        for point in series["points"]
    ]


def _approx(rows: list[tuple[float, str, int, float, float, float]]) -> list[tuple[Any, ...]]:
    return [
        (round(t, 3), host, n, round(mean, 9), low, high) for t, host, n, mean, low, high in rows
    ]


def _job(api: TestClient, settings: Settings, source_dir: Path) -> InstanceHeaders:
    return submit_for_instances(
        api,
        settings,
        source_dir,
        instance_count=2,
        metric_definitions=[{"name": "loss", "regex": r"loss: ([-+0-9.eE]+)"}],
    )


def test_three_hours_in_ten_buckets_of_whole_minutes(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = _job(api, settings, source_dir)
    # A point every 10 s for three hours on algo-1; algo-2 starts 25 s later and stops at
    # the half, with values that are not in order.
    values = {
        "algo-1": [(10 * i, float(i)) for i in range(1080)],
        "algo-2": [(25 + 10 * i, float((i * 7) % 13)) for i in range(540)],
    }
    for host, points in values.items():
        _ship(api, headers, host, points)

    series = _series(api, max_points=10)

    # 10790 s over 10 buckets, rounded up to whole minutes: 18 minutes each, from 00:00.
    assert series["bucket_seconds"] == 1080
    assert _approx(_got(series)) == _approx(_expected(values, 0, 1080, 10))
    assert {point["host"] for point in series["points"]} == {"algo-1", "algo-2"}
    assert sum(point["count"] for point in series["points"]) == 1620


def test_a_short_range_is_bucketed_from_the_points_themselves(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = _job(api, settings, source_dir)
    values = {"algo-1": [(i, float(i * i % 17)) for i in range(120)]}
    _ship(api, headers, "algo-1", values["algo-1"])

    series = _series(api, max_points=5)

    # 119 s in 5: buckets of 23.8 s, shorter than a minute; the last point, on the far
    # edge, joins the last bucket.
    assert series["bucket_seconds"] == 23.8
    assert _approx(_got(series)) == _approx(_expected(values, 0, 23.8, 5))


def test_start_and_end_bound_the_range_and_few_points_come_as_they_are(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = _job(api, settings, source_dir)
    _ship(api, headers, "algo-1", [(60 * i, float(i)) for i in range(600)])  # ten hours
    window = {"start": _time(3600).isoformat(), "end": _time(7200).isoformat()}

    # An hour holds 61 points: with room for 100 they are the stored points.
    stored = _series(api, max_points=100, **window)
    assert stored["bucket_seconds"] is None
    assert [point["value"] for point in stored["points"]] == [float(i) for i in range(60, 121)]
    assert stored["points"][0]["count"] is None

    bucketed = _series(api, max_points=4, **window)
    assert bucketed["bucket_seconds"] == 900
    assert [(point["count"], point["value"]) for point in bucketed["points"]] == [
        (15, 67.0),
        (15, 82.0),
        (15, 97.0),
        (16, 112.5),
    ]
    # Without max_points, the latest of the window.
    latest = _series(api, limit=3, **window)
    assert [point["value"] for point in latest["points"]] == [118.0, 119.0, 120.0]
    # Nothing in range.
    empty = _series(api, max_points=4, start=_time(10**6).isoformat())
    assert empty["points"] == []
    assert empty["bucket_seconds"] is None


def test_bad_ranges_are_refused_naming_the_parameter(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    _job(api, settings, source_dir)
    refused: dict[str, dict[str, str | int]] = {
        "start": {"start": _time(10).isoformat(), "end": _time(5).isoformat()},
        "end": {"end": "2026-01-01T00:00:00"},  # no time zone
        "max_points": {"max_points": 0},
    }
    for field, params in refused.items():
        response = api.get(f"{JOB}/metrics", params=params)
        assert response.status_code == 422, (field, response.text)
        assert response.json()["detail"][0]["loc"] == ["query", field]
