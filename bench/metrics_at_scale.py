"""A week-long job's metrics and logs: how fast they are stored, how long describe, the
metrics route (downsampled and latest) and a page of logs take once they are, and what
log retention does to a live job's writes while it deletes them.

It starts a throwaway `runyard server` (SQLite, or ``--database-url`` PostgreSQL with
``--broker-url``), submits a 2-instance job that waits in line (so nothing but the bench
writes its lines), and ships, for each host, ``--days`` of one line a second carrying the
metric, plus ``--extra-lines`` more lines per second without it, through the instances'
own log route, with the times they would have had. 50 lines a second for 7 days is 30
million lines per host: ``--extra-lines 49`` asks for that where the disk and the time
allow.

Then the job's end is moved back beyond the retention period and retention runs, in
its batches, while a second, live job ships lines; the live job's slowest batch is
printed beside its median, with and without retention running.

    .venv/bin/python bench/metrics_at_scale.py [--days 7] [--extra-lines 0]
        [--database-url postgresql://... --broker-url redis://...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from _server import REPO, server_and_home

sys.path.insert(0, str(REPO))

from sqlalchemy import text

from contract.limits import MAX_LOG_BATCH
from runyard.client import Client
from service.auth.tokens import instance_token
from service.kit.db import session_scope
from service.metrics.retention import Pruned, prune_ended_jobs

HOSTS = ("algo-1", "algo-2")
METRIC = {"name": "loss", "regex": r"loss: ([-+0-9.eE]+)"}
READS = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=7.0, help="days of one point a second")
    parser.add_argument(
        "--extra-lines", type=int, default=0, help="lines a second without the metric, per host"
    )
    parser.add_argument("--database-url", help="PostgreSQL for the server (default: SQLite)")
    parser.add_argument("--broker-url", help="its broker (default: SQLite)")
    args = parser.parse_args()

    settings = {"RUNYARD_CAPACITY": '{"local": 2}', "RUNYARD_LOCAL_ISOLATION": "shared"}
    if args.database_url:
        settings["RUNYARD_DATABASE_URL"] = args.database_url
    if args.broker_url:
        settings["RUNYARD_BROKER_URL"] = args.broker_url
    with server_and_home(settings) as (client, home):
        key = (home / "secret_key").read_text().strip().encode()
        source = _source(client)
        # Holds both instances, so the jobs after it wait in line and only the bench
        # writes their lines.
        _submit(client, source, "blocker")
        week = _submit(client, source, "week")
        seconds = int(args.days * 86400)
        print(
            f"{args.days:g} days, {len(HOSTS)} hosts, {1 + args.extra_lines} lines/s each "
            f"({seconds * (1 + args.extra_lines) * len(HOSTS):,} lines, "
            f"{seconds * len(HOSTS):,} points), database {args.database_url or 'SQLite'}"
        )
        started = time.perf_counter()
        _ship_all(client.url, key, week, seconds, args.extra_lines)
        took = time.perf_counter() - started
        lines = seconds * (1 + args.extra_lines) * len(HOSTS)
        print(f"stored in {took:.1f} s: {lines / took:,.0f} lines/s")
        database_url = args.database_url or f"sqlite:///{home / 'runyard.db'}"
        _check_stored(database_url, week["id"], lines, seconds * len(HOSTS))
        _reads(client, week["name"])
        _retention(client, key, source, database_url, week)


def _source(client: Client) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "train.py").write_text("import time\ntime.sleep(3600)\n")
        return client.upload_source(Path(scratch))


def _submit(client: Client, source: str, label: str) -> dict[str, Any]:
    return client.create_job(
        {
            "name": f"{label}-{uuid.uuid4().hex[:6]}",
            "entry_point": "train.py",
            "source_uri": source,
            "instance_type": "local",
            "instance_count": len(HOSTS),
            "metric_definitions": [METRIC],
        }
    )


def _batches(seconds: int, extra: int, start: datetime) -> Iterator[list[dict[str, Any]]]:
    """A host's lines, a batch at a time, stamped from ``start`` on."""
    batch: list[dict[str, Any]] = []
    seq = 0
    for second in range(seconds):
        stamp = (start + timedelta(seconds=second)).isoformat().replace("+00:00", "Z")
        seq += 1
        batch.append(
            {
                "seq": seq,
                "time": stamp,
                "stream": "stdout",
                "message": f"step {second} loss: {1.0 / (1 + second % 3600):.6f}",
            }
        )
        for n in range(extra):
            seq += 1
            batch.append({"seq": seq, "time": stamp, "stream": "stdout", "message": f"working {n}"})
        if len(batch) >= MAX_LOG_BATCH - extra:
            yield batch
            batch = []
    if batch:
        yield batch


def _ship_all(url: str, key: bytes, job: dict[str, Any], seconds: int, extra: int) -> None:
    start = datetime.now(UTC) - timedelta(seconds=seconds)
    failures: list[BaseException] = []

    def ship(host: str) -> None:
        try:
            with _instance_http(url, key, job, host) as http:
                for batch in _batches(seconds, extra, start):
                    _post(http, job["name"], host, batch)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=ship, args=(host,)) for host in HOSTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _instance_http(url: str, key: bytes, job: dict[str, Any], host: str) -> httpx.Client:
    token = instance_token(key, job["id"], host)
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def _post(http: httpx.Client, name: str, host: str, batch: list[dict[str, Any]]) -> None:
    response = http.post(f"/v1/training-jobs/{name}/instances/{host}/logs", json={"lines": batch})
    response.raise_for_status()


def _check_stored(database_url: str, job_id: str, lines: int, points: int) -> None:
    """Every line stored, and every point found in them: points are found once a batch's
    answer is sent, so the last ones may come a little after it."""
    started = time.perf_counter()
    while True:
        stored = _stored(database_url, job_id)
        if stored == {"lines": lines, "points": points}:
            print(f"every point found {time.perf_counter() - started:.1f} s after the last batch")
            return
        if time.perf_counter() - started > 120:
            raise RuntimeError(f"shipped {lines} lines and {points} points, stored {stored}")
        time.sleep(0.5)


def _stored(database_url: str, job_id: str) -> dict[str, Any]:
    with session_scope(database_url, readonly=True) as session:
        return {
            # A chunk holds a line for each of its seqs.
            "lines": session.scalar(
                text(
                    "SELECT coalesce(sum(last_seq - first_seq + 1), 0) FROM log_chunks "
                    "WHERE job_id = :id"
                ),
                {"id": job_id},
            ),
            "points": session.scalar(
                text("SELECT count(*) FROM metric_points WHERE job_id = :id"), {"id": job_id}
            ),
        }


def _reads(client: Client, name: str) -> None:
    http = httpx.Client(
        base_url=client.url, headers={"Authorization": f"Bearer {client.token}"}, timeout=60
    )
    last_hour = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    reads: dict[str, Callable[[], httpx.Response]] = {
        "describe": lambda: http.get(f"/v1/training-jobs/{name}"),
        "metrics, whole run in 500": lambda: http.get(
            f"/v1/training-jobs/{name}/metrics", params={"max_points": 500}
        ),
        "metrics, last hour in 500": lambda: http.get(
            f"/v1/training-jobs/{name}/metrics", params={"max_points": 500, "start": last_hour}
        ),
        "metrics, latest 1000": lambda: http.get(f"/v1/training-jobs/{name}/metrics"),
        "logs, first 1000": lambda: http.get(f"/v1/training-jobs/{name}/logs"),
        "logs of algo-2, first 1000": lambda: http.get(
            f"/v1/training-jobs/{name}/logs", params={"host": "algo-2"}
        ),
    }
    for label, read in reads.items():
        latencies = []
        for _ in range(READS):
            began = time.perf_counter()
            read().raise_for_status()
            latencies.append(time.perf_counter() - began)
        latencies.sort()
        print(
            f"{label:<28} p50 {latencies[len(latencies) // 2] * 1000:6.1f} ms  "
            f"p99 {latencies[int(len(latencies) * 0.99)] * 1000:6.1f} ms"
        )


def _retention(
    client: Client, key: bytes, source: str, database_url: str, week: dict[str, Any]
) -> None:
    client.stop_job(week["name"])
    client.wait(week["name"], poll=0.2)
    with session_scope(database_url) as session:
        # As if it had ended 31 days ago.
        session.execute(
            text("UPDATE training_jobs SET ended_at = :ended WHERE id = :id"),
            {
                "ended": (datetime.now(UTC) - timedelta(days=31)).replace(tzinfo=None),
                "id": week["id"],
            },
        )
    live = _submit(client, source, "live")
    quiet = _live_writes(client.url, key, live, until=lambda: False, batches=40)
    done = threading.Event()
    pruned: list[Pruned] = []

    def prune() -> None:
        try:
            pruned.append(prune_ended_jobs(database_url, 30))
        finally:
            done.set()

    began = time.perf_counter()
    threading.Thread(target=prune).start()
    busy = _live_writes(client.url, key, live, until=done.is_set, batches=None, first_seq=10**6)
    done.wait()
    took = time.perf_counter() - began
    total = pruned[0] if pruned else Pruned(0, 0)
    print(
        f"retention: {total.log_lines:,} lines and {total.metric_points:,} points in "
        f"{took:.1f} s ({(total.log_lines + total.metric_points) / took:,.0f} rows/s)"
    )
    for label, times in (("alone", quiet), ("during retention", busy)):
        median = statistics.median(times) * 1000
        print(
            f"live job's batch of 100 lines, {label:<16} median {median:6.1f} ms"
            f"  max {max(times) * 1000:6.1f} ms  ({len(times)} batches)"
        )


def _live_writes(
    url: str,
    key: bytes,
    job: dict[str, Any],
    *,
    until: Callable[[], bool],
    batches: int | None,
    first_seq: int = 1,
) -> list[float]:
    """Seconds per 100-line batch that a live job's instance ships, one after another."""
    times: list[float] = []
    seq = first_seq
    with _instance_http(url, key, job, "algo-1") as http:
        while (batches is None or len(times) < batches) and not until():
            stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            batch = [
                {"seq": seq + n, "time": stamp, "stream": "stdout", "message": f"loss: {n}"}
                for n in range(100)
            ]
            seq += 100
            began = time.perf_counter()
            _post(http, job["name"], "algo-1", batch)
            times.append(time.perf_counter() - began)
    return times


if __name__ == "__main__":
    main()
