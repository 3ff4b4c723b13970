"""Logging under load: a script printing 100,000 progress lines, bare and under Runyard,
and how many lines a second the service stores from one instance, on SQLite and PostgreSQL.

Three figures, each the median of ``--runs``:

- bare: the script run by the same interpreter with its output read from a pipe, as the
  runtime reads it (PYTHONUNBUFFERED=1, as the runtime sets for scripts);
- under Runyard: a 1-instance job on a fresh `runyard server` with its embedded defaults,
  timed from the runtime starting the script (its "Starting" line) to the instance's final
  report, which the runtime sends only once every line is stored; the script's own time
  and POST -> Completed as the client sees it (polled every 0.5 s) are printed beside it,
  and every line is checked to be stored, in order;
- ingest: the runtime's own LogShipper sending ``--lines`` lines for a live job's instance
  as fast as they can be handed to it, from the first line to the last one stored, on a
  server using SQLite, then on one using a fresh database on the local PostgreSQL
  (``--postgres``, an admin URL; the database is dropped afterwards).

    .venv/bin/python bench/log_throughput.py [--runs 3] [--lines 100000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from _server import REPO, server_and_home

# For the tests' throwaway PostgreSQL databases.
sys.path.insert(0, str(REPO))

from runtime.reporting.reporter import LogShipper, ServiceClient
from runyard.client import Client
from service.auth.tokens import instance_token
from tests import postgres

SCRIPT = """\
import sys, time
started = time.perf_counter()
lines = int(sys.argv[sys.argv.index("--lines") + 1])
for step in range(lines):
    print(f"step {step} of {lines} loss {1.0 / (step + 1):.6f}")
print(f"elapsed {time.perf_counter() - started:.3f}")
"""
# A job that stays live (and so may still report lines) until its release file appears.
WAITING_SCRIPT = """\
import os, sys, time
release = sys.argv[sys.argv.index("--release") + 1]
while not os.path.exists(release):
    time.sleep(0.1)
"""
# The bench ships its lines as the waiting job's algo-1, numbered after whatever the
# instance's own runtime sends, so the service's per-host numbering keeps both.
BENCH_FIRST_SEQ = 1_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument(
        "--postgres",
        default=os.environ.get("RUNYARD_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1/test"),
        help="an admin URL of a PostgreSQL server; a fresh database is made on it",
    )
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="runyard-logs-") as scratch:
        source = Path(scratch) / "src"
        source.mkdir()
        (source / "progress.py").write_text(SCRIPT)
        (source / "wait.py").write_text(WAITING_SCRIPT)
        bare = _median(args.runs, lambda: _bare(source / "progress.py", args.lines))
        print(f"bare: {bare:.2f} s")
        with server_and_home() as (client, home):
            job = _under_runyard(client, source, args.runs, args.lines)
            sqlite_rate = _median(args.runs, lambda: _ingest(client, home, source, args.lines))
        print(f"ingest on SQLite: {sqlite_rate:,.0f} lines/s")
        with (
            postgres.empty_database(args.postgres, "runyard_bench") as url,
            server_and_home({"RUNYARD_DATABASE_URL": url}) as (client, home),
        ):
            postgres_rate = _median(args.runs, lambda: _ingest(client, home, source, args.lines))
        print(f"ingest on PostgreSQL: {postgres_rate:,.0f} lines/s")
    # Other work on the machine slows every figure: the load says how much there was.
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    print(f"\n{args.lines:,} lines, median of {args.runs} ({load}, {os.cpu_count()} CPUs):")
    print(f"  bare script:                            {bare:6.2f} s")
    print(f"  under Runyard, script start -> stored:  {job['stored']:6.2f} s")
    print(f"  under Runyard, the script's own time:   {job['script']:6.2f} s")
    print(f"  under Runyard, POST -> Completed:       {job['total']:6.2f} s")
    print(f"  ingest, SQLite:                         {sqlite_rate:10,.0f} lines/s")
    print(f"  ingest, PostgreSQL:                     {postgres_rate:10,.0f} lines/s")


def _median(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def _bare(script: Path, lines: int) -> float:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    subprocess.run(
        [sys.executable, str(script), "--lines", str(lines)],
        env=env,
        stdout=subprocess.PIPE,
        check=True,
    )
    return time.monotonic() - started


def _under_runyard(client: Client, source: Path, runs: int, lines: int) -> dict[str, float]:
    source_uri = client.upload_source(source)
    figures: dict[str, list[float]] = {"stored": [], "script": [], "total": []}
    for run in range(runs):
        name = f"progress-{run}-{uuid.uuid4().hex[:6]}"
        started = time.monotonic()
        client.create_job(
            {
                "name": name,
                "entry_point": "progress.py",
                "source_uri": source_uri,
                "instance_type": "local",
                "hyperparameters": {"lines": lines},
            }
        )
        # Not polled often: the API that answers is the one storing the lines.
        job = client.wait(name, poll=0.5)
        total = time.monotonic() - started
        if job["status"] != "Completed":
            raise RuntimeError(f"{name} ended {job['status']}: {job['failure_reason']}")
        events = list(client.logs(name))
        _check_every_line(events, lines)
        start = next(e["time"] for e in events if e["message"].startswith("Starting 1 process"))
        reported = job["instances"][0]["reported_at"]
        stored = (datetime.fromisoformat(reported) - datetime.fromisoformat(start)).total_seconds()
        script = float(_message(events, "elapsed ").split()[1])
        print(
            f"run {run + 1}: script start -> every line stored {stored:.2f} s, "
            f"script's own time {script:.2f} s, POST -> Completed {total:.2f} s"
        )
        figures["stored"].append(stored)
        figures["script"].append(script)
        figures["total"].append(total)
    return {key: statistics.median(values) for key, values in figures.items()}


def _message(events: list[dict[str, Any]], prefix: str) -> str:
    return next(e["message"] for e in events if e["message"].startswith(prefix))


def _check_every_line(events: list[dict[str, Any]], lines: int) -> None:
    printed = [e["message"] for e in events if e["stream"] == "stdout"]
    expected = [f"step {step} of {lines}" for step in range(lines)]
    if len(printed) != lines + 1 or any(
        not got.startswith(want) for got, want in zip(printed, expected, strict=False)
    ):
        raise RuntimeError(f"{len(printed)} of {lines + 1} lines stored, or out of order")


def _ingest(client: Client, home: Path, source: Path, lines: int) -> float:
    """Lines a second from the runtime's shipper into the database, for a live job."""
    name = f"ingest-{uuid.uuid4().hex[:8]}"
    release = home / f"{name}.release"
    job = client.create_job(
        {
            "name": name,
            "entry_point": "wait.py",
            "source_uri": client.upload_source(source),
            "instance_type": "local",
            "hyperparameters": {"release": str(release)},
        }
    )
    try:
        _wait_for_training(client, name)
        key = (home / "secret_key").read_text().strip().encode()
        token = instance_token(key, job["id"], "algo-1")
        shipper = LogShipper(
            ServiceClient(client.url, token, name, "algo-1"),
            echo=False,
            first_seq=BENCH_FIRST_SEQ,
        ).start()
        started = time.monotonic()
        for step in range(lines):
            shipper.emit("stdout", f"step {step} of {lines} loss {1.0 / (step + 1):.6f}")
        shipper.close()
        elapsed = time.monotonic() - started
    finally:
        release.touch()
    client.wait(name, poll=0.2)
    stored = sum(1 for e in client.logs(name, host="algo-1") if e["message"].startswith("step "))
    if stored != lines:
        raise RuntimeError(f"{stored} of {lines} shipped lines stored")
    rate = lines / elapsed
    print(f"ingest: {lines:,} lines in {elapsed:.2f} s, {rate:,.0f} lines/s")
    return rate


def _wait_for_training(client: Client, name: str) -> None:
    while client.get_job(name)["secondary_status"] != "Training":
        time.sleep(0.1)


if __name__ == "__main__":
    main()
