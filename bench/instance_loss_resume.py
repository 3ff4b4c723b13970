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
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from _server import REPO, log_lines, print_medians, resume_figures, server_and_home, wait_for_line

from runyard.client import Client

EPOCHS = 40


def run_once(client: Client, home: Path, source_uri: str, scratch: Path, run: int) -> list[float]:
    name = f"loss-{run}"
    job = client.create_job(
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
    wait_for_line(client, name, "epoch 5/")
    pid = json.loads((home / "jobs" / job["id"] / "algo-2.pid.json").read_text())["pid"]
    killed = datetime.now(UTC)
    os.killpg(pid, signal.SIGKILL)
    job = client.wait(name, poll=0.1, timeout=300)
    figures = resume_figures(job, log_lines(client, name), killed, EPOCHS)
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
    with (
        tempfile.TemporaryDirectory() as scratch,
        # The checkpoints go to the scratch directory, which jobs must be allowed to use.
        server_and_home({"RUNYARD_FILE_ROOTS": scratch}) as (client, home),
    ):
        source_uri = client.upload_source(REPO / "examples" / "checkpointing")
        for run in range(args.runs):
            results.append(run_once(client, home, source_uri, Path(scratch), run))
    labels = ["kill -> Restarting seen", "kill -> script resumed", "kill -> first epoch after"]
    print_medians(f"median of {args.runs}", labels, results)


if __name__ == "__main__":
    main()
