"""Seconds from an instance cut off the job's network to training resuming from its
checkpoint.

A 2-instance torch_distributed job of examples/checkpointing keeps a checkpoint per epoch
in a file:// checkpoint store, each instance a host of its own (Linux namespaces: run as
root). Once it has trained a few epochs, algo-2's link to the job's network goes down
(`ip link set <its veth> down`): its collectives and algo-1's block, and the runtimes'
peer watch (RUNYARD_PEER_TIMEOUT_SECONDS, given below) finds the instance lost; the job
restarts on new instances, which restore the checkpoint and go on. Printed per run, and
the median:

  cut -> Restarting seen      how long until the service decided to restart
  cut -> script resumed       until the new attempt's script printed its first line
  cut -> first epoch after    until it had trained again

    .venv/bin/python bench/network_cut_resume.py [--runs 3] [--peer-timeout 10]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from _server import REPO, log_lines, print_medians, resume_figures, server_and_home, wait_for_line

from provisioning.local import network
from runyard.client import Client

EPOCHS = 40


def run_once(client: Client, source_uri: str, scratch: Path, run: int) -> list[float]:
    name = f"cut-{run}"
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
    if client.get_job(name)["isolation"] != "namespaces":
        raise RuntimeError("instances have no network of their own here (run as root)")
    veth = network.plan(job["id"], ["algo-1", "algo-2"]).port("algo-2").veth
    cut = datetime.now(UTC)
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    job = client.wait(name, poll=0.1, timeout=600)
    figures = resume_figures(job, log_lines(client, name), cut, EPOCHS)
    print(
        f"run {run + 1}: cut->Restarting {figures[0]:.2f} s, cut->resumed {figures[1]:.2f} s, "
        f"cut->first epoch after {figures[2]:.2f} s"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peer-timeout", type=float, default=10.0)
    args = parser.parse_args()
    settings = {"RUNYARD_PEER_TIMEOUT_SECONDS": str(args.peer_timeout)}
    results = []
    with (
        tempfile.TemporaryDirectory() as scratch,
        # The checkpoints go to the scratch directory, which jobs must be allowed to use.
        server_and_home({**settings, "RUNYARD_FILE_ROOTS": scratch}) as (client, _home),
    ):
        source_uri = client.upload_source(REPO / "examples" / "checkpointing")
        for run in range(args.runs):
            results.append(run_once(client, source_uri, Path(scratch), run))
    labels = ["cut -> Restarting seen", "cut -> script resumed", "cut -> first epoch after"]
    print_medians(f"median of {args.runs}, peer timeout {args.peer_timeout:g} s", labels, results)


if __name__ == "__main__":
    main()
