"""Seconds from an instance lost mid-training to training resuming from its checkpoint.

A 2-instance torch_distributed job of examples/checkpointing keeps a checkpoint per epoch
in a file:// checkpoint store. Once it has trained a few epochs, algo-2's whole process
group is killed (SIGKILL, as a machine that dies); the job is restarted on new instances,
which restore the checkpoint and go on. Printed per run, and the median:

  kill -> Restarting seen      how long the service took to notice and decide
  kill -> script resumed       until the new attempt's script printed its first line
  kill -> first epoch after    until it had trained again

    .venv/bin/python bench/instance_loss_resume.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _server import REPO, server_and_home

from runyard.client import Client

EPOCHS = 40


def _lines(client: Client, name: str) -> list[dict[str, str]]:
    return [event for event in client.logs(name) if "message" in event]


def _first(events: list[dict[str, str]], text: str, after: datetime) -> datetime | None:
    times = [
        datetime.fromisoformat(event["time"])
        for event in events
        if text in event["message"] and datetime.fromisoformat(event["time"]) > after
    ]
    return min(times) if times else None


def run_once(client: Client, home: Path, source_uri: str, scratch: Path, run: int) -> list[float]:
    name = f"loss-{run}"
    client.create_job(
        {
            "name": name,
            "entry_point": "train.py",
            "source_uri": source_uri,
            "instance_type": "local",
            "instance_count": 2,
            "distribution": {"torch_distributed": {"enabled": True}},
            "hyperparameters": {"epochs": EPOCHS, "epoch-seconds": 0.2},
            "checkpoint_s3_uri": (scratch / name).as_uri(),
        }
    )
    deadline = time.monotonic() + 120
    while not any("epoch 5/" in e["message"] for e in _lines(client, name)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} never reached epoch 5")
        time.sleep(0.05)
    pid = json.loads((home / "jobs" / name / "algo-2.pid.json").read_text())["pid"]
    killed = datetime.now(UTC)
    os.killpg(pid, signal.SIGKILL)
    job = client.wait(name, poll=0.1, timeout=300)
    assert job["status"] == "Completed", job
    restarting = next(t for t in job["transitions"] if t["secondary_status"] == "Restarting")
    events = _lines(client, name)
    resumed = _first(events, "resumed from checkpoint at epoch", killed)
    trained = _first(events, f"/{EPOCHS} loss", resumed or killed)
    if resumed is None or trained is None:
        raise RuntimeError(f"{name} did not resume after the kill")
    figures = [
        (datetime.fromisoformat(restarting["start_time"]) - killed).total_seconds(),
        (resumed - killed).total_seconds(),
        (trained - killed).total_seconds(),
    ]
    print(
        f"run {run + 1}: kill->Restarting {figures[0]:.2f} s, kill->resumed {figures[1]:.2f} s, "
        f"kill->first epoch after {figures[2]:.2f} s"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch, server_and_home() as (client, home):
        source_uri = client.upload_source(REPO / "examples" / "checkpointing")
        for run in range(args.runs):
            results.append(run_once(client, home, source_uri, Path(scratch), run))
    columns = list(zip(*results, strict=True))
    print(f"\nmedian of {args.runs}:")
    for label, values in zip(
        ("kill -> Restarting seen", "kill -> script resumed", "kill -> first epoch after"),
        columns,
        strict=True,
    ):
        print(f"  {label:<26} {statistics.median(values):.2f} s")


if __name__ == "__main__":
    main()
