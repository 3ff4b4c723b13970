"""Followed logs cannot starve the API: 200 streams open on one running job, over HTTP
against a served API, hold no database connection while they wait, get every line, and
leave another user's requests answered; a stream beyond the server's or a token's limit is
refused with 429 and Retry-After; none is answered 500. A stream that starts from a long
log's first line reads it from the database and then the job's shared tail, every line
once and in each host's order."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import QueuePool, select

from runyard.client import Client
from service.app import create_app
from service.jobs.models import TrainingJob
from service.kit.db import get_engine, session_scope
from service.logs import follow, stream_slots
from service.settings import Settings
from tests.conftest import InstanceHeaders, log_line, make_settings, submit_for_instances
from tests.service.sagemaker.live import serving

STREAMS = 200
START = datetime(2026, 1, 1, tzinfo=UTC)
PER_TOKEN = 20
LOGS = "/v1/training-jobs/job-1/logs"


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return make_settings(
        tmp_path / "home",
        database_url,
        max_log_streams=STREAMS,
        max_log_streams_per_token=PER_TOKEN,
    )


@pytest.fixture
def server(settings: Settings, admin_token: str) -> Iterator[str]:
    with serving(create_app(settings)) as url:
        yield url


def _viewer(api: TestClient, name: str) -> dict[str, str]:
    response = api.post("/v1/tokens", json={"name": name, "role": "viewer"})
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _events(body: str) -> list[tuple[str, str]]:
    """(event, data) of each server-sent event in ``body``."""
    found = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            found.append((fields["event"], fields.get("data", "")))
    return found


def _end_job(settings: Settings) -> None:
    with session_scope(settings.database_url) as session:
        session.scalars(select(TrainingJob)).one().status = "Completed"


def test_two_hundred_streams_on_a_job_leave_the_api_to_everyone_else(
    api: TestClient, settings: Settings, server: str, source_dir: Path
) -> None:
    instance = submit_for_instances(api, settings, source_dir)
    ship = f"{LOGS.removesuffix('/logs')}/instances/algo-1/logs"
    api.post(ship, json={"lines": [log_line(1, 0, "before")]}, headers=instance)
    watchers = [_viewer(api, f"watcher-{n}") for n in range(STREAMS // PER_TOKEN)]
    other = _viewer(api, "other")
    pool = get_engine(settings.database_url).pool
    assert isinstance(pool, QueuePool)

    async def load() -> tuple[Counter[str], list[httpx.Response], list[int]]:
        caught_up = asyncio.Semaphore(0)
        limits = httpx.Limits(max_connections=STREAMS + 20)
        async with httpx.AsyncClient(base_url=server, timeout=60, limits=limits) as http:

            async def stream(n: int) -> str:
                headers = watchers[n // PER_TOKEN]
                params = {"follow": "true"}
                async with http.stream("GET", LOGS, params=params, headers=headers) as response:
                    assert response.status_code == 200, await response.aread()
                    body = ""
                    async for text in response.aiter_text():
                        if "before" not in body and "before" in body + text:
                            caught_up.release()
                        body += text
                    return body

            streams = [asyncio.create_task(stream(n)) for n in range(STREAMS)]
            for _ in range(STREAMS):
                await asyncio.wait_for(caught_up.acquire(), 60)
            # All caught up: waiting, they hold no connection. The tails' reader holds one
            # while it reads, and so may the streams' reads of their callers' credentials
            # (each token's every 5 s, CATCH_UP_READS at once), which a slow machine's
            # catch-up spreads into this window.
            await asyncio.sleep(2 * follow.FOLLOW_POLL_SECONDS)
            held = []
            for _ in range(10):
                held.append(pool.checkedout())
                await asyncio.sleep(follow.FOLLOW_POLL_SECONDS / 3)
            # Another user's requests are answered meanwhile; one stream more is refused,
            # for the server and for a token.
            answers = [
                await http.get("/v1/training-jobs/job-1", headers=other, timeout=10),
                await http.get(LOGS, headers=other, timeout=10),
                await http.get(LOGS, params={"follow": "true"}, headers=other, timeout=10),
            ]
            # A line printed now reaches every stream, then the job's end ends them.
            after = {"lines": [log_line(2, 1, "after")]}
            shipped = await http.post(ship, json=after, headers=dict(instance))
            assert shipped.status_code == 200, shipped.text
            await asyncio.to_thread(_end_job, settings)
            bodies = await asyncio.wait_for(asyncio.gather(*streams), 60)
        seen: Counter[str] = Counter()
        for body in bodies:
            events = _events(body)
            seen.update(json.loads(data)["message"] for event, data in events if event == "log")
            seen.update(event for event, _ in events if event == "end")
        return seen, answers, held

    seen, answers, held = asyncio.run(load())
    assert seen == {"before": STREAMS, "after": STREAMS, "end": STREAMS}
    assert max(held) <= 1 + follow.CATCH_UP_READS, held
    described, page, refused = answers
    assert described.status_code == 200, described.text
    assert page.status_code == 200, page.text
    assert refused.status_code == 429, refused.text
    assert refused.headers["Retry-After"] == str(stream_slots.RETRY_AFTER_SECONDS)


def test_a_token_beyond_its_streams_is_refused_with_retry_after(
    api: TestClient, settings: Settings, server: str, source_dir: Path
) -> None:
    submit_for_instances(api, settings, source_dir)
    watcher = _viewer(api, "watcher")

    async def load() -> tuple[list[int], httpx.Response, int]:
        async with httpx.AsyncClient(base_url=server, timeout=30) as http:
            streams = []
            for _ in range(PER_TOKEN):
                request = http.build_request(
                    "GET", LOGS, params={"follow": "true"}, headers=watcher
                )
                streams.append(await http.send(request, stream=True))
            beyond = await http.get(LOGS, params={"follow": "true"}, headers=watcher)
            for response in streams:
                await response.aclose()
            # Closed, the streams give their places back (once the server sees them gone).
            deadline = asyncio.get_running_loop().time() + 10
            while True:
                request = http.build_request(
                    "GET", LOGS, params={"follow": "true"}, headers=watcher
                )
                again = await http.send(request, stream=True)
                status = again.status_code
                await again.aclose()
                if status != 429 or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.1)
            return [response.status_code for response in streams], beyond, status

    opened, beyond, after = asyncio.run(load())
    assert opened == [200] * PER_TOKEN
    assert beyond.status_code == 429
    assert beyond.headers["Retry-After"] == str(stream_slots.RETRY_AFTER_SECONDS)
    assert "a token may follow 20 logs at once" in beyond.json()["detail"]
    assert after == 200


def test_a_stream_from_a_long_logs_first_line_gets_every_line_once_in_order(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small tail, so that the stream reads the database, then the tail, and falls behind
    # it again while lines keep coming.
    monkeypatch.setattr(follow, "TAIL_BYTES", 4096)
    instance = submit_for_instances(api, settings, source_dir, instance_count=2)
    _ship(api, instance, range(1, 1501))

    def more() -> None:
        for first in range(1501, 3001, 100):
            _ship(api, instance, range(first, first + 100))
        _end_job(settings)

    shipping = threading.Thread(target=more)
    shipping.start()
    with api.stream("GET", LOGS, params={"follow": "true"}) as response:
        body = "".join(response.iter_text())
    shipping.join()
    events = _events(body)
    assert events[-1][0] == "end"
    lines = [json.loads(data) for event, data in events if event == "log"]
    for host in ("algo-1", "algo-2"):
        assert [line["seq"] for line in lines if line["host"] == host] == list(range(1, 3001))


def _ship(api: TestClient, instance: InstanceHeaders, seqs: range) -> None:
    """Lines ``seqs`` of both hosts, a millisecond apart, as a runtime numbers and stamps
    them."""
    base = "/v1/training-jobs/job-1/instances"
    for host in ("algo-1", "algo-2"):
        lines = [
            {
                "seq": seq,
                "time": (START + timedelta(milliseconds=seq)).isoformat(),
                "stream": "stdout",
                "message": f"{host} line {seq}",
            }
            for seq in seqs
        ]
        headers: dict[str, Any] = instance.of(host)
        response = api.post(f"{base}/{host}/logs", json={"lines": lines}, headers=headers)
        assert response.status_code == 200, response.text


def test_the_client_follows_once_its_token_has_room_again(
    api: TestClient,
    settings: Settings,
    server: str,
    source_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stream_slots, "RETRY_AFTER_SECONDS", 1)
    instance = submit_for_instances(api, settings, source_dir, instance_count=2)
    _ship(api, instance, range(1, 4))
    watcher = _viewer(api, "watcher")
    token = watcher["Authorization"].removeprefix("Bearer ")
    followed: list[dict[str, Any]] = []

    with httpx.Client(base_url=server, headers=watcher, timeout=30) as http:
        held = []
        for _ in range(PER_TOKEN):
            request = http.build_request("GET", LOGS, params={"follow": "true"})
            held.append(http.send(request, stream=True))
        assert http.get(LOGS, params={"follow": "true"}).status_code == 429

        def follow_logs() -> None:
            with Client(server, token) as client:
                followed.extend(client.follow_logs("job-1"))

        following = threading.Thread(target=follow_logs)
        following.start()
        following.join(2.5)
        assert following.is_alive()  # refused, and asking again after Retry-After
        for response in held:
            response.close()
        _end_job(settings)
        following.join(30)
    assert not following.is_alive()
    lines = [line["message"] for line in followed if "message" in line]
    assert lines == [f"{host} line {seq}" for seq in range(1, 4) for host in ("algo-1", "algo-2")]
    assert followed[-1] == {"end": "Completed"}
