"""Logging under load: a script printing 100,000 progress lines, bare and under Runyard,
and how many lines a second the service stores from one instance, on SQLite and PostgreSQL.

Figures, each the median of ``--runs``, with the machine's single-core speed:

- bare: the script run by the same interpreter with its output read from a pipe, as the
  runtime reads it (PYTHONUNBUFFERED=1, as the runtime sets for scripts);
- under Runyard: a 1-instance job on a fresh `runyard server` with its embedded defaults,
  timed from the runtime starting the script (its "Starting" line) to the instance's final
  report, which the runtime sends only once every line is stored; the script's own time
  and POST -> Completed as the client sees it (polled every 0.5 s) are printed beside it,
  and every line is checked to be stored, in order; then the same job printing one line,
  and what the lines cost the job: its submit-to-Completed time (the server's own times,
  from its creation to its Completed transition) beyond the one-line job's, and the API
  process's CPU per 1,000 lines stored;
- ingest: the runtime's own LogShipper sending ``--lines`` lines for a live job's instance
  as fast as they can be handed to it, from the first line to the last one stored, on a
  server using SQLite, then on one using a fresh database on the local PostgreSQL
  (``--postgres``, an admin URL; the database is dropped afterwards), each with the API
  process's CPU per 1,000 lines stored.

    .venv/bin/python bench/log_throughput.py [--runs 3] [--lines 100000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import json
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

from _machine import describe as describe_machine
from _machine import process_cpu_seconds
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
# A job that stays live (and so may still report lines) until it is stopped. (Not until a
# file of the bench's appears: an instance sees a /tmp of its own.)
WAITING_SCRIPT = """\
import time
while True:
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
    machine = describe_machine()
    print(machine)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="runyard-logs-") as scratch:
        source = Path(scratch) / "src"
        source.mkdir()
        (source / "progress.py").write_text(SCRIPT)
        (source / "wait.py").write_text(WAITING_SCRIPT)
        bare = _median(args.runs, lambda: _bare(source / "progress.py", args.lines))
        print(f"bare: {bare:.2f} s")
        with server_and_home() as (client, home):
            job = _under_runyard(client, _api_pid(home), source, args.runs, args.lines)
            sqlite = _medians([_ingest(client, home, source, args.lines) for _ in range(args.runs)])
        print(f"ingest on SQLite: {sqlite[0]:,.0f} lines/s")
        with (
            postgres.empty_database(args.postgres, "runyard_bench") as url,
            server_and_home({"RUNYARD_DATABASE_URL": url}) as (client, home),
        ):
            on_postgres = _medians(
                [_ingest(client, home, source, args.lines) for _ in range(args.runs)]
            )
        print(f"ingest on PostgreSQL: {on_postgres[0]:,.0f} lines/s")
    # Other work on the machine slows every figure: the load says how much there was.
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    print(f"\n{args.lines:,} lines, median of {args.runs} ({load}, {os.cpu_count()} CPUs):")
    print(f"  {machine}")
    print(f"  bare script:                            {bare:6.2f} s")
    print(f"  under Runyard, script start -> stored:  {job['stored']:6.2f} s")
    print(f"  under Runyard, the script's own time:   {job['script']:6.2f} s")
    print(f"  under Runyard, POST -> Completed:       {job['total']:6.2f} s")
    print(f"  submit -> Completed (server's times):   {job['server']:6.2f} s")
    print(f"  the same for a one-line job:            {job['one_line']:6.2f} s")
    print(f"  what the lines cost the job:            {job['server'] - job['one_line']:6.2f} s")
    print(f"  API CPU per 1,000 lines, the job's:     {job['cpu']:6.1f} ms")
    print(f"  ingest, SQLite:                         {sqlite[0]:10,.0f} lines/s")
    print(f"  API CPU per 1,000 lines, SQLite:        {sqlite[1]:6.1f} ms")
    print(f"  ingest, PostgreSQL:                     {on_postgres[0]:10,.0f} lines/s")
    print(f"  API CPU per 1,000 lines, PostgreSQL:    {on_postgres[1]:6.1f} ms")


def _median(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def _medians(figures: list[tuple[float, float]]) -> tuple[float, float]:
    return (
        statistics.median(first for first, _ in figures),
        statistics.median(second for _, second in figures),
    )


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


def _under_runyard(
    client: Client, api: int, source: Path, runs: int, lines: int
) -> dict[str, float]:
    source_uri = client.upload_source(source)
    figures: dict[str, list[float]] = {
        key: [] for key in ("stored", "script", "total", "server", "one_line", "cpu")
    }
    # Untimed: a server's first job sets up what every later one reuses.
    _run_job(client, api, source_uri, 1)
    for run in range(runs):
        one_line, one_line_cpu = _run_job(client, api, source_uri, 1)
        figures["one_line"].append(one_line["server"])
        job, cpu = _run_job(client, api, source_uri, lines)
        # The lines' share of the API's CPU: beyond what a job of one line costs it.
        figures["cpu"].append((cpu - one_line_cpu) / lines * 1000 * 1000)
        print(
            f"run {run + 1}: script start -> every line stored {job['stored']:.2f} s, "
            f"script's own time {job['script']:.2f} s, POST -> Completed {job['total']:.2f} s; "
            f"submit -> Completed {job['server']:.2f} s, a one-line job's "
            f"{one_line['server']:.2f} s"
        )
        for key in ("stored", "script", "total", "server"):
            figures[key].append(job[key])
    return {key: statistics.median(values) for key, values in figures.items()}


def _run_job(
    client: Client, api: int, source_uri: str, lines: int
) -> tuple[dict[str, float], float]:
    """A job printing ``lines`` lines, timed, with every line checked to be stored; and
    the API process's CPU seconds while it ran."""
    name = f"progress-{lines}-{uuid.uuid4().hex[:6]}"
    cpu_before = process_cpu_seconds(api)
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
    cpu = process_cpu_seconds(api) - cpu_before
    if job["status"] != "Completed":
        raise RuntimeError(f"{name} ended {job['status']}: {job['failure_reason']}")
    events = list(client.logs(name))
    _check_every_line(events, lines)
    start = next(e["time"] for e in events if e["message"].startswith("Starting 1 process"))
    reported = job["instances"][0]["reported_at"]
    stored = (datetime.fromisoformat(reported) - datetime.fromisoformat(start)).total_seconds()
    script = float(_message(events, "elapsed ").split()[1])
    completed = next(t for t in job["transitions"] if t["secondary_status"] == "Completed")
    server = (
        datetime.fromisoformat(completed["start_time"]) - datetime.fromisoformat(job["created_at"])
    ).total_seconds()
    return {"stored": stored, "script": script, "total": total, "server": server}, cpu


def _api_pid(home: Path) -> int:
    """The throwaway server's API process: the server's own, with one API process."""
    return int(json.loads((home / "server.json").read_text())["pid"])


def _message(events: list[dict[str, Any]], prefix: str) -> str:
    return next(e["message"] for e in events if e["message"].startswith(prefix))


def _check_every_line(events: list[dict[str, Any]], lines: int) -> None:
    printed = [e["message"] for e in events if e["stream"] == "stdout"]
    expected = [f"step {step} of {lines}" for step in range(lines)]
    if len(printed) != lines + 1 or any(
        not got.startswith(want) for got, want in zip(printed, expected, strict=False)
    ):
        raise RuntimeError(f"{len(printed)} of {lines + 1} lines stored, or out of order")


def _ingest(client: Client, home: Path, source: Path, lines: int) -> tuple[float, float]:
    """Lines a second from the runtime's shipper into the database, for a live job, and
    the API process's CPU per 1,000 lines stored (ms)."""
    name = f"ingest-{uuid.uuid4().hex[:8]}"
    job = client.create_job(
        {
            "name": name,
            "entry_point": "wait.py",
            "source_uri": client.upload_source(source),
            "instance_type": "local",
        }
    )
    try:
        _wait_for_training(client, name)
        key = (home / "secret_key").read_text().strip().encode()
        token = instance_token(key, job["id"], "algo-1")
        api = _api_pid(home)
        cpu_before = process_cpu_seconds(api)
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
        cpu = process_cpu_seconds(api) - cpu_before
    finally:
        client.stop_job(name)
    client.wait(name, poll=0.2)
    stored = sum(1 for e in client.logs(name, host="algo-1") if e["message"].startswith("step "))
    if stored != lines:
        raise RuntimeError(f"{stored} of {lines} shipped lines stored")
    rate = lines / elapsed
    per_thousand = cpu / lines * 1000 * 1000
    print(
        f"ingest: {lines:,} lines in {elapsed:.2f} s, {rate:,.0f} lines/s, "
        f"API CPU {per_thousand:.1f} ms per 1,000 lines"
    )
    return rate, per_thousand


def _wait_for_training(client: Client, name: str) -> None:
    while client.get_job(name)["secondary_status"] != "Training":
        time.sleep(0.1)


if __name__ == "__main__":
    main()
