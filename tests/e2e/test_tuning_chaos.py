"""The worker killed (SIGKILL) four times while a tuning job's trials run (some as a
trial ends, when its end wakes the tuner), each time started again a second later: the
tuning job still completes, each of its trials submitted exactly once, never more than
its parallel limit at once, and every trial's objective taken in.

The tuner's state is in the database only (``service.tuning.tuner``): whatever pass the
killed worker was in the middle of is lost with its transaction, the broker redelivers
what it had not acknowledged, and the sweep sends a pass for every live tuning job.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from runyard.client import Client
from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

TRIALS = 6
PARALLEL = 2

# Long enough that a kill lands while trials run; the loss depends on the tuned ``shift``
# alone (lowest at shift = 0.3), so each trial's objective can be checked against its value.
SCRIPT = """\
import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--shift", type=float, required=True)
x = parser.parse_known_args()[0].shift
time.sleep(2)
print(f"shift={x} loss={(x - 0.3) ** 2 + 0.05:.6f}", flush=True)
"""


def _spec(client: Client, source: Path) -> dict[str, Any]:
    return {
        "name": "chaos",
        "strategy": "Random",
        "objective": {"type": "Minimize", "metric_name": "loss"},
        "resource_limits": {
            "max_number_of_training_jobs": TRIALS,
            "max_parallel_training_jobs": PARALLEL,
        },
        "parameter_ranges": {"continuous": [{"name": "shift", "min_value": 0.0, "max_value": 1.0}]},
        "random_seed": 7,
        "training_job": {
            "entry_point": "train.py",
            "source_uri": client.upload_source(source),
            "instance_type": "local",
            "metric_definitions": [{"name": "loss", "regex": "loss=([0-9.]+)"}],
        },
    }


def _wait(stack: Stack, client: Client, condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 240
    while not condition():
        if time.monotonic() > deadline:
            tuning = client.get_tuning_job("chaos")
            trials = [(t["name"], t["status"]) for t in tuning["trials"]]
            pytest.fail(
                f"tuning job {tuning['status']}, waiting for {what}; trials {trials}\n"
                f"{stack.diagnostics()}"
            )
        time.sleep(0.05)


def _asked_and_running(client: Client, asked: int) -> bool:
    trials = client.get_tuning_job("chaos")["trials"]
    return len(trials) >= asked and any(t["status"] == "InProgress" for t in trials)


def _completed(client: Client) -> int:
    """How many training jobs have completed (before the tuner may have taken it in)."""
    return len(client.list_jobs(status="Completed", limit=100)["items"])


def _all_job_names(client: Client) -> list[str]:
    names, cursor = [], None
    while True:
        page = client.list_jobs(limit=100, cursor=cursor)
        names += [item["name"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return names


def _most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    """The most spans open at one moment (a span ending as another begins: not both)."""
    edges = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_a_tuning_job_outlives_its_worker_killed_while_trials_run(
    stack: Stack, tmp_path: Path
) -> None:
    source = tmp_path / "trial"
    source.mkdir()
    (source / "train.py").write_text(SCRIPT)
    with stack.client() as client:
        client.create_tuning_job(_spec(client, source))
        # Killed while the first trials run; as soon as a trial's job is seen ended (as
        # its end wakes the tuner), and a moment after a later one's (as the pass runs,
        # or just after); and while the last trials run.
        kills: list[tuple[str, Callable[[], bool], float]] = [
            ("trial 1 to run", lambda: _asked_and_running(client, 1), 0.0),
            ("a trial to end", lambda: _completed(client) >= 1, 0.0),
            ("3 trials to end", lambda: _completed(client) >= 3, random.uniform(0.0, 0.5)),
            ("trial 5 to run", lambda: _asked_and_running(client, 5), 0.0),
        ]
        for what, condition, delay in kills:
            _wait(stack, client, condition, what)
            time.sleep(delay)
            stack.kill("worker")  # SIGKILL: its passes and acknowledgements are lost
            time.sleep(1)
            stack.start("worker")
        _wait(
            stack,
            client,
            lambda: client.get_tuning_job("chaos")["status"] != "InProgress",
            "its end",
        )
        tuning = client.get_tuning_job("chaos")
        trials = tuning["trials"]
        jobs = [client.get_job(trial["name"]) for trial in trials]
        names = _all_job_names(client)

    assert tuning["status"] == "Completed", (tuning["failure_reason"], stack.diagnostics())
    assert [trial["number"] for trial in trials] == list(range(1, TRIALS + 1))
    # Each trial's training job was submitted once: no other job of the stack (none of
    # another name for the same trial, none left of a pass that died half-way).
    assert sorted(names) == sorted(trial["name"] for trial in trials)
    assert len(set(names)) == TRIALS
    for trial, job in zip(trials, jobs, strict=True):
        assert (trial["status"], job["status"]) == ("Completed", "Completed"), stack.explain(job)
        # Taken in: the value the script printed for the parameters it was given.
        assert trial["objective_status"] == "Succeeded"
        expected = (trial["parameters"]["shift"] - 0.3) ** 2 + 0.05
        assert trial["objective"] == pytest.approx(expected, abs=1e-5)
    spans = [
        (datetime.fromisoformat(job["created_at"]), datetime.fromisoformat(job["ended_at"]))
        for job in jobs
    ]
    assert _most_at_once(spans) <= PARALLEL, spans
    assert tuning["training_job_counts"]["completed"] == TRIALS
    best = min(trials, key=lambda trial: trial["objective"])
    assert tuning["best_trial"]["name"] == best["name"]
