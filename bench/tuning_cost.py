"""What a tuning job adds to its trials: the wall time beyond the trials' own training
jobs, and the CPU its tuner's passes take, per trial.

Each round runs the same N training jobs (a script that sleeps ``--sleep`` seconds and
prints a loss) twice on one fresh `runyard server` with its embedded defaults:

- direct: submitted by this script, never more than ``--parallel`` at once, the next
  submitted as soon as this script sees one end (it looks every 0.2 s);
- tuned: as the trials of a Random tuning job of ``--trials`` trials, ``--parallel`` at once.

Wall time is the server's: from the first job's creation to the last one's end (direct),
from the tuning job's creation to its end (tuned). CPU is that of the server's worker
process and of its API process (each without the instances they start), read from /proc
before and after each run; the worker's background work while idle (its sweeps, at the
rate measured before the first round) is taken out of both. The difference, per trial, is
what the tuner costs. The API's includes this script's own polling: of each running job
(direct), of the tuning job (tuned). Also printed: the median time from a job's end to the
creation of the job that takes its place, the tuner's (woken by the end) against this
script's. A trial's training job is created in the worker, by its tuner, where a direct
one is created in the API: so also printed, the two together. Medians over ``--rounds``.

    .venv/bin/python bench/tuning_cost.py [--trials 6] [--parallel 2] [--sleep 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from _machine import describe, process_cpu_seconds
from _server import server_and_home

from runyard.client import Client

SCRIPT = """\
import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--shift", type=float, default=0.5)
parser.add_argument("--sleep", type=float, default=1.0)
arguments = parser.parse_known_args()[0]
time.sleep(arguments.sleep)
print(f"loss={(arguments.shift - 0.3) ** 2 + 0.05:.6f}", flush=True)
"""
POLL = 0.2
IDLE_SECONDS = 10.0
TERMINAL = ("Completed", "Failed", "Stopped")


def _parts(home: Path) -> dict[str, int]:
    """The pids of the server's API (the supervisor itself) and of its worker."""
    api = int(json.loads((home / "server.json").read_text())["pid"])
    for task in Path(f"/proc/{api}/task").glob("*"):
        for child in (task / "children").read_text().split():
            words = Path(f"/proc/{child}/cmdline").read_text().split("\0")
            if "worker" in words:
                return {"API": api, "worker": int(child)}
    raise RuntimeError("the server has no worker process")


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {part: process_cpu_seconds(pid) for part, pid in pids.items()}


def _job(source_uri: str, sleep: float) -> dict[str, Any]:
    return {
        "entry_point": "train.py",
        "source_uri": source_uri,
        "instance_type": "local",
        "hyperparameters": {"sleep": sleep},
        "metric_definitions": [{"name": "loss", "regex": "loss=([0-9.]+)"}],
    }


def _direct(
    client: Client, job: dict[str, Any], run: str, trials: int, parallel: int
) -> tuple[float, float]:
    """N jobs, ``parallel`` at once, as a script of a user's would run them: the wall
    seconds, and the median from a job's end to its successor's creation."""
    waiting = [f"{run}-{n}" for n in range(trials)]
    running: list[str] = []
    while waiting or running:
        running = [name for name in running if client.get_job(name)["status"] not in TERMINAL]
        while waiting and len(running) < parallel:
            name = waiting.pop(0)
            client.create_job({**job, "name": name, "hyperparameters": {**job["hyperparameters"]}})
            running.append(name)
        time.sleep(POLL)
    jobs = [client.get_job(f"{run}-{n}") for n in range(trials)]
    assert all(job["status"] == "Completed" for job in jobs), [j["status"] for j in jobs]
    wall = _seconds(min(j["created_at"] for j in jobs), max(j["ended_at"] for j in jobs))
    return wall, _reaction(jobs, parallel)


def _tuned(
    client: Client, job: dict[str, Any], run: str, trials: int, parallel: int
) -> tuple[float, float]:
    client.create_tuning_job(
        {
            "name": run,
            "strategy": "Random",
            "objective": {"type": "Minimize", "metric_name": "loss"},
            "resource_limits": {
                "max_number_of_training_jobs": trials,
                "max_parallel_training_jobs": parallel,
            },
            "parameter_ranges": {
                "continuous": [{"name": "shift", "min_value": 0.0, "max_value": 1.0}]
            },
            "training_job": job,
        }
    )
    tuning = client.wait_tuning_job(run, poll=POLL)
    completed = tuning["training_job_counts"]["completed"]
    assert tuning["status"] == "Completed", tuning
    assert completed == trials, tuning
    jobs = [client.get_job(trial["name"]) for trial in tuning["trials"]]
    first = _seconds(tuning["created_at"], min(j["created_at"] for j in jobs))
    last = _seconds(max(j["ended_at"] for j in jobs), tuning["ended_at"])
    print(f"  tuned: to the first trial {first:.2f} s, from the last trial's end {last:.2f} s")
    return _seconds(tuning["created_at"], tuning["ended_at"]), _reaction(jobs, parallel)


def _reaction(jobs: list[dict[str, Any]], parallel: int) -> float:
    """The median seconds from a job's end to the creation of the job that took its place
    (the k-th job beyond the first ``parallel`` took the k-th end's)."""
    created = sorted(datetime.fromisoformat(job["created_at"]) for job in jobs)
    ended = sorted(datetime.fromisoformat(job["ended_at"]) for job in jobs)
    return statistics.median(
        (start - end).total_seconds() for start, end in zip(created[parallel:], ended, strict=False)
    )


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _measured(
    pids: dict[str, int],
    idle_rate: dict[str, float],
    run: Callable[..., tuple[float, float]],
    *args: Any,
) -> tuple[tuple[float, float], dict[str, float]]:
    """What ``run(*args)`` returns, and each part's CPU seconds beyond its idle work."""
    before, started = _cpu(pids), time.monotonic()
    wall = run(*args)
    time.sleep(2 * POLL)  # the last pass's and the last end's work
    elapsed = time.monotonic() - started
    after = _cpu(pids)
    return wall, {part: after[part] - before[part] - idle_rate[part] * elapsed for part in pids}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=1.0, help="seconds each script sleeps")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(describe())
    n = args.trials
    extra_wall: list[float] = []
    extra_cpu: dict[str, list[float]] = {"API": [], "worker": [], "both": []}
    reactions: dict[str, list[float]] = {"direct": [], "tuned": []}
    with tempfile.TemporaryDirectory() as scratch, server_and_home() as (client, home):
        (Path(scratch) / "train.py").write_text(SCRIPT)
        job = _job(client.upload_source(Path(scratch)), args.sleep)
        pids = _parts(home)
        # One job first, untimed: the worker's imports and first connections are no
        # part of a trial's cost, nor of its idle rate.
        client.create_job({**job, "name": "warm-up"})
        client.wait("warm-up", poll=POLL)
        time.sleep(2)
        idle = _cpu(pids)
        time.sleep(IDLE_SECONDS)
        idle_rate = {
            part: (seconds - idle[part]) / IDLE_SECONDS for part, seconds in _cpu(pids).items()
        }
        print(
            f"idle: worker {idle_rate['worker'] * 1e3:.1f} ms, "
            f"API {idle_rate['API'] * 1e3:.1f} ms of CPU a second"
        )
        for round_ in range(args.rounds):
            direct, direct_cpu = _measured(
                pids, idle_rate, _direct, client, job, f"direct-{round_}", n, args.parallel
            )
            tuned, tuned_cpu = _measured(
                pids, idle_rate, _tuned, client, job, f"tuned-{round_}", n, args.parallel
            )
            (direct_wall, direct_reaction), (tuned_wall, tuned_reaction) = direct, tuned
            extra_wall.append((tuned_wall - direct_wall) / n)
            reactions["direct"].append(direct_reaction)
            reactions["tuned"].append(tuned_reaction)
            for part in ("API", "worker"):
                extra_cpu[part].append((tuned_cpu[part] - direct_cpu[part]) / n)
            extra_cpu["both"].append(extra_cpu["API"][-1] + extra_cpu["worker"][-1])
            print(
                f"round {round_ + 1}: wall direct {direct_wall:.2f} s, tuned {tuned_wall:.2f} s; "
                f"a job's end to the next's creation direct {direct_reaction:.2f} s, tuned "
                f"{tuned_reaction:.2f} s; "
                f"worker CPU direct {direct_cpu['worker']:.2f} s, tuned "
                f"{tuned_cpu['worker']:.2f} s; API CPU direct {direct_cpu['API']:.2f} s, "
                f"tuned {tuned_cpu['API']:.2f} s"
            )
    print(f"\n{n} trials, {args.parallel} at once, median of {args.rounds} rounds, per trial:")
    print(f"  wall time beyond the jobs' own: {statistics.median(extra_wall):+.3f} s")
    print(
        "  a trial's end to the next one's creation: "
        f"{statistics.median(reactions['tuned']):.2f} s (direct, polling every {POLL:g} s: "
        f"{statistics.median(reactions['direct']):.2f} s)"
    )
    # A trial's job is created by the worker (its tuner), a direct one by the API.
    for part, label in (
        ("worker", "worker CPU (the tuner's passes)"),
        ("API", "API CPU"),
        ("both", "worker and API together"),
    ):
        print(f"  {label + ':':<32} {statistics.median(extra_cpu[part]) * 1e3:+.1f} ms")
    print(
        "\nreproduce: .venv/bin/python bench/tuning_cost.py "
        f"--trials {n} --parallel {args.parallel} --sleep {args.sleep:g} --rounds {args.rounds}"
    )


if __name__ == "__main__":
    main()
