"""What one request costs the API over large stored data, and what open log streams cost
everyone else's requests.

It starts a throwaway `runyard server` (SQLite, or ``--database-url`` PostgreSQL with
``--broker-url``), stores ``--jobs`` jobs whose specs are as large as a spec may be (134 KB
of hyperparameters and environment; the first submitted through the API, the rest copies
of its row with names of their own, ended) and a running job whose host printed
``--log-lines`` lines of 16,000 characters. Then, one request at a time, it measures the
API process's CPU per request and how far its resident memory rose above where it stood
(at its peak while the requests ran, and after them) for: SageMaker's Search (boto3), a
REST list page and ListTrainingJobs, a REST log page, GetLogEvents and FilterLogEvents, and
a whole log's download.

Last it opens ``--streams`` followed log streams (``logs?follow=true``) on the running job,
whose host goes on printing a line every 50 ms, and measures another user's requests
meanwhile: their latency, and every answer the streams and they got.

    .venv/bin/python bench/bounded_requests.py [--jobs 5000] [--log-lines 4000]
        [--streams 200] [--rounds 5] [--database-url postgresql://... --broker-url redis://...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx
from _server import REPO, server_and_home
from botocore.config import Config

sys.path.insert(0, str(REPO))

from sqlalchemy import insert, select

from runyard.client import Client
from service.auth.tokens import instance_token
from service.jobs.models import TrainingJob
from service.kit.db import session_scope

REGION = "eu-west-1"
LINE = 16_000
# As large as a spec may be: 100 hyperparameters of 900 characters, 100 variables of 380.
HYPERPARAMETERS = {f"hp_{n:03d}": "h" * 900 for n in range(100)}
ENVIRONMENT = {f"VAR_{n:03d}": "e" * 380 for n in range(100)}
OTHER_REQUESTS = 40
STREAMS_PER_TOKEN = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000, help="jobs stored (default 5000)")
    parser.add_argument(
        "--log-lines", type=int, default=4000, help="16,000-character lines (default 4000)"
    )
    parser.add_argument("--streams", type=int, default=200, help="streams opened (default 200)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="requests of each kind measured (default 5)"
    )
    parser.add_argument("--database-url", help="PostgreSQL for the server (default: SQLite)")
    parser.add_argument("--broker-url", help="its broker (default: SQLite)")
    args = parser.parse_args()

    # Room for one job, the first (which sleeps): the running job waits in line behind it,
    # so only the bench prints its lines.
    settings = {"RUNYARD_CAPACITY": '{"local": 1}', "RUNYARD_LOCAL_ISOLATION": "shared"}
    if args.database_url:
        settings["RUNYARD_DATABASE_URL"] = args.database_url
    if args.broker_url:
        settings["RUNYARD_BROKER_URL"] = args.broker_url
    with server_and_home(settings) as (client, home):
        database_url = args.database_url or f"sqlite:///{home / 'runyard.db'}"
        api = _Api(home)
        source = _source(client)
        seed = client.create_job(_spec("seed", source, large=True))
        started = time.perf_counter()
        _copy_jobs(database_url, seed["id"], args.jobs - 1)
        print(
            f"{args.jobs} jobs of {_record_kib(database_url, seed['id'])} KiB records, "
            f"database {args.database_url or 'SQLite'} (stored in "
            f"{time.perf_counter() - started:.0f} s)"
        )
        running = client.create_job(_spec("running", source, large=False))
        key = (home / "secret_key").read_text().strip().encode()
        _ship_long_lines(client.url, key, running, args.log_lines)
        print(f"a running job with {args.log_lines} lines of {LINE:,} characters\n")
        _requests(client, api, running["name"], args.rounds)
        print()
        _streams(client, key, running, args.streams)


class _Api:
    """The API process of the server at ``home``: its CPU time and resident memory."""

    def __init__(self, home: Path) -> None:
        import json

        self.pid = int(json.loads((home / "server.json").read_text())["pid"])

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[-1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def memory(self, field: str) -> float:
        """VmRSS (now) or VmHWM (the peak since ``reset_peak``), in MiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no {field} for {self.pid}")

    def reset_peak(self) -> None:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")


def _source(client: Client) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "train.py").write_text("import time\ntime.sleep(3600)\n")
        return client.upload_source(Path(scratch))


def _spec(label: str, source: str, *, large: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": f"{label}-{uuid.uuid4().hex[:6]}",
        "entry_point": "train.py",
        "source_uri": source,
        "instance_type": "local",
        "instance_count": 1,
        "tags": [{"key": "team", "value": "vision"}],
    }
    if large:
        spec.update(hyperparameters=HYPERPARAMETERS, environment=ENVIRONMENT)
    return spec


def _copy_jobs(database_url: str, seed_id: str, count: int) -> None:
    """``count`` copies of the seed job's row, each with a name and id of its own, made a
    second apart before it, ended (so that nothing drives them)."""
    table = TrainingJob.__table__
    with session_scope(database_url) as session:
        seed = dict(session.execute(select(table).where(table.c.id == seed_id)).mappings().one())
    for start in range(0, count, 200):
        rows = []
        for n in range(start, min(count, start + 200)):
            when = seed["created_at"] - timedelta(seconds=n + 1)
            rows.append(
                {
                    **seed,
                    "id": f"{uuid.uuid4().hex}",
                    "name": f"copy-{n:05d}",
                    "created_at": when,
                    "updated_at": when,
                    "ended_at": when,
                    "status": "Completed",
                    "secondary_status": "Completed",
                    "stage": "Ended",
                }
            )
        with session_scope(database_url) as session:
            session.execute(insert(table), rows)


def _record_kib(database_url: str, job_id: str) -> int:
    import json

    with session_scope(database_url, readonly=True) as session:
        spec = session.scalar(select(TrainingJob.spec).where(TrainingJob.id == job_id))
    return len(json.dumps(spec)) // 1024


def _ship_long_lines(url: str, key: bytes, job: dict[str, Any], count: int) -> None:
    start = datetime.now(UTC) - timedelta(hours=1)
    with _instance_http(url, key, job) as http:
        for first in range(1, count + 1, 200):
            batch = [
                {
                    "seq": seq,
                    "time": (start + timedelta(milliseconds=seq)).isoformat(),
                    "stream": "stdout",
                    "message": f"{seq:08d} " + "x" * (LINE - 9),
                }
                for seq in range(first, min(count, first + 199) + 1)
            ]
            response = http.post(
                f"/v1/training-jobs/{job['name']}/instances/algo-1/logs", json={"lines": batch}
            )
            response.raise_for_status()


def _instance_http(url: str, key: bytes, job: dict[str, Any]) -> httpx.Client:
    token = instance_token(key, job["id"], "algo-1")
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def _requests(client: Client, api: _Api, running: str, rounds: int) -> None:
    http = httpx.Client(
        base_url=client.url, headers={"Authorization": f"Bearer {client.token}"}, timeout=600
    )
    keys = http.post("/v1/me/aws-credentials").raise_for_status().json()
    session = boto3.session.Session(
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
        region_name=REGION,
    )
    config = Config(retries={"mode": "standard", "max_attempts": 1}, read_timeout=600)
    sm = session.client("sagemaker", endpoint_url=client.url, config=config)
    logs = session.client("logs", endpoint_url=client.url, config=config)
    group = "/aws/sagemaker/TrainingJobs"
    stream = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=running + "/")[
        "logStreams"
    ][0]["logStreamName"]
    nothing = {"Filters": [{"Name": "Tags.team", "Operator": "Equals", "Value": "speech"}]}
    requests: dict[str, Callable[[], str]] = {
        "Search (default: 10, last modified)": lambda: _results(sm.search(Resource="TrainingJob")),
        "Search, MaxResults 100": lambda: _results(
            sm.search(Resource="TrainingJob", MaxResults=100)
        ),
        "Search, a tag no job has": lambda: _results(
            sm.search(Resource="TrainingJob", MaxResults=100, SearchExpression=nothing)
        ),
        "REST list, 100": lambda: _items(http.get("/v1/training-jobs", params={"limit": 100})),
        "REST list, a tag no job has": lambda: _items(
            http.get("/v1/training-jobs", params={"limit": 100, "tag": "team=speech"})
        ),
        "ListTrainingJobs, 100": lambda: (
            f"{len(sm.list_training_jobs(MaxResults=100)['TrainingJobSummaries'])} jobs"
        ),
        "REST log page, limit 10000": lambda: _events(
            http.get(f"/v1/training-jobs/{running}/logs", params={"limit": 10_000})
        ),
        "GetLogEvents, from the head": lambda: _lines(
            logs.get_log_events(logGroupName=group, logStreamName=stream, startFromHead=True)
        ),
        # As the SageMaker SDK reads a job's log: its streams, by the job's name.
        "FilterLogEvents, the job's streams": lambda: _lines(
            logs.filter_log_events(
                logGroupName=group, logStreamNamePrefix=running + "/", filterPattern="xxx"
            )
        ),
        "the log's download (whole)": lambda: (
            f"{len(http.get(f'/v1/training-jobs/{running}/logs/download').content) >> 20} MiB"
        ),
    }
    print(f"{'request':<38} {'CPU/request':>12} {'peak RSS':>10} {'RSS after':>10}  answer")
    for label, make in requests.items():
        make()  # warm: the first of a kind compiles its statements
        before = api.memory("VmRSS")
        api.reset_peak()
        spent = api.cpu()
        for _ in range(rounds):
            answer = make()
        cpu = (api.cpu() - spent) / rounds
        peak, after = api.memory("VmHWM") - before, api.memory("VmRSS") - before
        print(f"{label:<38} {cpu * 1000:9.0f} ms {peak:+8.0f} MiB {after:+8.0f} MiB  {answer}")


def _results(answer: dict[str, Any]) -> str:
    token = "NextToken" if "NextToken" in answer else "no token"
    return f"{len(answer['Results'])} results, {token}"


def _items(response: httpx.Response) -> str:
    page = response.raise_for_status().json()
    return f"{len(page['items'])} jobs, cursor {'yes' if page['next_cursor'] else 'no'}"


def _lines(answer: dict[str, Any]) -> str:
    return f"{len(answer['events'])} lines"


def _events(response: httpx.Response) -> str:
    page = response.raise_for_status().json()
    return f"{len(page['events'])} lines, cursor {'yes' if page['next_cursor'] else 'no'}"


def _streams(client: Client, key: bytes, running: dict[str, Any], count: int) -> None:
    http = httpx.Client(
        base_url=client.url, headers={"Authorization": f"Bearer {client.token}"}, timeout=60
    )
    # Streams of several users, STREAMS_PER_TOKEN a token; another user's requests meanwhile.
    tokens = [_token(http, f"watcher-{n}") for n in range(-(-count // STREAMS_PER_TOKEN))]
    other = _token(http, "other")
    with _printing(client.url, key, running):
        answers, latencies, others = asyncio.run(
            _follow_and_ask(client.url, running["name"], tokens, other, count)
        )
    latencies.sort()
    print(f"{count} followed streams on {running['name']}: answered {dict(answers)}")
    print(
        f"another user's requests meanwhile: p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99)] * 1000:.0f} ms, "
        f"max {latencies[-1] * 1000:.0f} ms; answered {dict(others)}"
    )


def _token(http: httpx.Client, name: str) -> str:
    response = http.post("/v1/tokens", json={"name": name, "role": "viewer"})
    return str(response.raise_for_status().json()["token"])


@contextmanager
def _printing(url: str, key: bytes, job: dict[str, Any]) -> Iterator[None]:
    """The job's host prints a line every 50 ms meanwhile."""
    stop = threading.Event()

    def print_lines() -> None:
        seq = 1_000_000
        with _instance_http(url, key, job) as http:
            while not stop.wait(0.05):
                seq += 1
                line = {
                    "seq": seq,
                    "time": datetime.now(UTC).isoformat(),
                    "stream": "stdout",
                    "message": f"step {seq}",
                }
                http.post(
                    f"/v1/training-jobs/{job['name']}/instances/algo-1/logs",
                    json={"lines": [line]},
                )

    thread = threading.Thread(target=print_lines, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


async def _follow_and_ask(
    url: str, name: str, tokens: list[str], other: str, count: int
) -> tuple[Counter[int], list[float], Counter[int]]:
    answers: Counter[int] = Counter()
    opened = asyncio.Event()
    done = asyncio.Event()
    limits = httpx.Limits(max_connections=count + 10)
    async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as http:

        async def follow(n: int) -> None:
            headers = {"Authorization": f"Bearer {tokens[n // STREAMS_PER_TOKEN]}"}
            try:
                async with http.stream(
                    "GET", f"/v1/training-jobs/{name}/logs", params={"follow": "true"},
                    headers=headers,
                ) as response:  # fmt: skip
                    answers[response.status_code] += 1
                    if sum(answers.values()) == count:
                        opened.set()
                    async for _chunk in response.aiter_bytes():
                        if done.is_set():
                            return
            except httpx.HTTPError:
                answers[0] += 1

        followers = [asyncio.create_task(follow(n)) for n in range(count)]
        try:
            await asyncio.wait_for(opened.wait(), 120)
        except TimeoutError:
            print(f"  (after 120 s, {count - sum(answers.values())} streams had no answer)")
        latencies: list[float] = []
        others: Counter[int] = Counter()
        headers = {"Authorization": f"Bearer {other}"}
        for _ in range(OTHER_REQUESTS):
            began = time.perf_counter()
            response = await http.get("/v1/training-jobs", params={"limit": 10}, headers=headers)
            latencies.append(time.perf_counter() - began)
            others[response.status_code] += 1
            await asyncio.sleep(0.05)
        done.set()
        for task in followers:
            task.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
    return answers, latencies, others


if __name__ == "__main__":
    main()
