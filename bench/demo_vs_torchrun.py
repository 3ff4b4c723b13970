"""Wall time of the demo job under Runyard against the same script under plain torchrun.

Runyard: POST until the client sees Completed (2 local instances x 1 process, DDP).
torchrun: `torchrun --nnodes 1 --nproc-per-node 2 train.py` with the same arguments.
Medians of --runs runs each, and their ratio.

    .venv/bin/python bench/demo_vs_torchrun.py [--runs 3] [--epochs 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _server import REPO, running_server

EXAMPLE = REPO / "examples" / "pytorch-ddp"


def torchrun_once(epochs: int) -> float:
    torchrun = Path(sys.executable).with_name("torchrun")
    with tempfile.TemporaryDirectory() as model_dir:
        env = {**os.environ, "SM_MODEL_DIR": model_dir}
        started = time.monotonic()
        subprocess.run(
            [
                str(torchrun),
                "--nnodes",
                "1",
                "--nproc-per-node",
                "2",
                str(EXAMPLE / "train.py"),
                "--epochs",
                str(epochs),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()
    plain = [torchrun_once(args.epochs) for _ in range(args.runs)]
    print("torchrun: " + ", ".join(f"{t:.2f} s" for t in plain))
    runyard = []
    with running_server() as client:
        source_uri = client.upload_source(EXAMPLE)
        for run in range(args.runs):
            spec = {
                "name": f"demo-{run}",
                "entry_point": "train.py",
                "source_uri": source_uri,
                "instance_type": "local",
                "instance_count": 2,
                "distribution": {"torch_distributed": {"enabled": True}},
                "hyperparameters": {"epochs": args.epochs},
            }
            started = time.monotonic()
            client.create_job(spec)
            job = client.wait(spec["name"], poll=0.05)
            runyard.append(time.monotonic() - started)
            assert job["status"] == "Completed", job
    print("runyard:  " + ", ".join(f"{t:.2f} s" for t in runyard))
    plain_median, runyard_median = statistics.median(plain), statistics.median(runyard)
    print(
        f"\nmedian of {args.runs}: torchrun {plain_median:.2f} s, Runyard {runyard_median:.2f} s, "
        f"ratio {runyard_median / plain_median:.2f}"
    )


if __name__ == "__main__":
    main()
