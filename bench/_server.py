"""A throwaway `runyard server` on its defaults, in a temporary RUNYARD_HOME, and what the
benchmarks read from its jobs' logs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from runyard.client import Client, RunyardError, admin_token, wait_until_up

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_server() -> Iterator[Client]:
    with server_and_home() as (client, _home):
        yield client


@contextmanager
def server_and_home(
    settings: dict[str, str] | None = None, python: Path | None = None
) -> Iterator[tuple[Client, Path]]:
    """The server's client and its RUNYARD_HOME, with ``settings`` (RUNYARD_* variables);
    ``python`` runs it (and so its local instances), this interpreter by default."""
    with tempfile.TemporaryDirectory(prefix="runyard-bench-") as home:
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
        env.update(settings or {})
        env["RUNYARD_HOME"] = home
        with open(Path(home) / "server.log", "ab") as log:
            server = subprocess.Popen(
                [str(python or sys.executable), "-m", "runyard", "server", "--port", str(port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Not the checkout: `python -m` would import Runyard from there first.
                cwd=home,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            if not wait_until_up(url, alive=lambda: server.poll() is None):
                raise RuntimeError(f"server did not start; see {Path(home) / 'server.log'}")
            time.sleep(1.0)  # let the worker connect to the broker before timing anything
            with Client(url, admin_token(Path(home))) as client:
                try:
                    yield client, Path(home)
                finally:
                    _stop_live_jobs(client)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)


# How long the jobs a bench left running get to end before its server stops.
STOP_LEFT_SECONDS = 120.0


def _stop_live_jobs(client: Client) -> None:
    """Stop the jobs a bench left running, and wait for them to end: a local instance
    outlives its server (so that a restart loses no job), and a throwaway server's would
    run on with nothing left to stop them."""
    deadline = time.monotonic() + STOP_LEFT_SECONDS
    while live := _jobs(client, "InProgress") + _jobs(client, "Stopping"):
        if time.monotonic() > deadline:
            print(f"  ({len(live)} jobs had not ended {STOP_LEFT_SECONDS:.0f} s after the stop)")
            return
        for job in live:
            if job["status"] == "InProgress":
                with contextlib.suppress(RunyardError):  # it ended meanwhile
                    client.stop_job(job["name"])
        time.sleep(0.5)


def _jobs(client: Client, status: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = client.list_jobs(status=status, limit=100, cursor=cursor)
        found += page["items"]
        if (cursor := page["next_cursor"]) is None:
            return found


def log_lines(client: Client, name: str) -> list[dict[str, str]]:
    """The lines of a job's log (its other events left out)."""
    return [event for event in client.logs(name) if "message" in event]


def first_line_at(events: list[dict[str, str]], text: str, after: datetime) -> datetime | None:
    """When the first line holding ``text`` came after ``after``; None: none did."""
    times = [
        datetime.fromisoformat(event["time"])
        for event in events
        if text in event["message"] and datetime.fromisoformat(event["time"]) > after
    ]
    return min(times) if times else None


def wait_for_line(client: Client, name: str, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in event["message"] for event in log_lines(client, name)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} never printed {text!r}")
        time.sleep(0.05)


def resume_figures(
    job: dict[str, Any], events: list[dict[str, str]], lost: datetime, epochs: int
) -> list[float]:
    """Seconds from ``lost`` (an instance gone) until a job of examples/checkpointing,
    restarted and completed since, was seen Restarting, had its script resume from its
    checkpoint, and had trained an epoch again."""
    assert job["status"] == "Completed", job
    restarting = next(t for t in job["transitions"] if t["secondary_status"] == "Restarting")
    resumed = first_line_at(events, "resumed from checkpoint at epoch", lost)
    trained = first_line_at(events, f"/{epochs} loss", resumed or lost)
    if resumed is None or trained is None:
        raise RuntimeError(f"{job['name']} did not resume after losing an instance")
    return [
        (datetime.fromisoformat(restarting["start_time"]) - lost).total_seconds(),
        (resumed - lost).total_seconds(),
        (trained - lost).total_seconds(),
    ]


def print_medians(heading: str, labels: list[str], results: list[list[float]]) -> None:
    """Under ``heading``, the median of each column of ``results``, by its label."""
    print(f"\n{heading}:")
    for label, values in zip(labels, zip(*results, strict=True), strict=True):
        print(f"  {label:<26} {statistics.median(values):.2f} s")
