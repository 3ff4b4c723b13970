"""Seconds from a job's last instance exiting to the job reading Completed, and the times
it is billed for, as DescribeTrainingJob gives them and the SageMaker SDK reads them.

Each job's script prints, sleeps, writes a model and exits; half the jobs run on spot.
The instances' exits are watched in /proc (the local backend's pid files name each
instance's leader); Completed is the start of the job's last transition. Billing is
checked against SageMaker's definitions: TrainingTimeInSeconds is TrainingEndTime minus
TrainingStartTime, BillableTimeInSeconds never exceeds it, and the SDK's spot savings,
(1 - billable / training) * 100, is the percentage Runyard stores.

    .venv/bin/python bench/job_end.py [--runs 6] [--instances 2] [--parallel 1]
        [--broker redis://127.0.0.1:6379/0] [--distribution '{"mpi": {"enabled": true}}']
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _server import REPO, server_and_home

from runyard.client import Client

sys.path.insert(0, str(REPO))

from service.jobs.billing import training_seconds
from tests.instance_exits import instance_leaders, last_exit

SCRIPT = """\
import os, time
print("training", flush=True)
time.sleep(float(os.environ["SLEEP_SECONDS"]))
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.bin"), "wb") as model:
    model.write(os.urandom(int(os.environ["MODEL_BYTES"])))
print("done", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=1, help="jobs running at once")
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds each script sleeps")
    parser.add_argument("--model-mb", type=float, default=20.0, help="model size, MB")
    parser.add_argument("--distribution", type=json.loads, default={}, help="as JSON")
    parser.add_argument("--broker", help="a broker URL (Redis, RabbitMQ); the embedded one else")
    args = parser.parse_args()
    wall, cpu = time.monotonic(), time.process_time()
    settings = {}
    if args.broker:
        settings = {"RUNYARD_BROKER_URL": args.broker, "RUNYARD_QUEUE": f"bench-{os.getpid()}"}
    with tempfile.TemporaryDirectory() as scratch, server_and_home(settings) as (client, home):
        (Path(scratch) / "job.py").write_text(SCRIPT)
        source_uri = client.upload_source(Path(scratch))

        def one(run: int) -> dict[str, Any]:
            spec = {
                "name": f"end-{run}",
                "entry_point": "job.py",
                "source_uri": source_uri,
                "instance_type": "local",
                "instance_count": args.instances,
                "distribution": args.distribution,
                "environment": {
                    "SLEEP_SECONDS": str(args.sleep),
                    "MODEL_BYTES": str(int(args.model_mb * 1e6)),
                },
            }
            if run % 2:
                spec.update(use_spot_instances=True, max_run=3600, max_wait=3600)
            return measure(client, home, spec)

        with ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(one, range(args.runs)))
    served = resource.getrusage(resource.RUSAGE_CHILDREN)
    for result in results:
        print(
            f"{result['name']:>7} {'spot' if result['spot'] else 'on-demand':>9}: "
            f"exit->Completed {result['exit_to_completed']:.3f} s "
            f"(seen {result['exit_to_seen']:.3f} s); training {result['training']} s, "
            f"billable {result['billable']} s, SDK savings {result['sdk_savings']}, "
            f"stored {result['stored_savings']}"
        )
    print(f"\n{args.instances}-instance jobs, {args.parallel} at once, median of {len(results)}:")
    for label, key in (
        ("last instance exit -> Completed", "exit_to_completed"),
        ("last instance exit -> client saw it", "exit_to_seen"),
    ):
        print(f"  {label:<36} {statistics.median(r[key] for r in results):.3f} s")
    print(
        "  billable <= training in every job:  "
        f"{all(r['billable'] <= r['training'] for r in results)}"
    )
    print(
        "  on demand, billable == training:    "
        f"{all(r['billable'] == r['training'] for r in results if not r['spot'])}"
    )
    print(
        "  SDK savings == stored savings:      "
        f"{all(r['sdk_savings'] == r['stored_savings'] for r in results)}"
    )
    print(
        f"\nwall {time.monotonic() - wall:.1f} s, CPU: this process "
        f"{time.process_time() - cpu:.1f} s, the server and its instances "
        f"{served.ru_utime + served.ru_stime:.1f} s"
    )


def measure(client: Client, home: Path, spec: dict[str, Any]) -> dict[str, Any]:
    job_id = client.create_job(spec)["id"]
    exited = last_exit(instance_leaders(home / "jobs" / job_id, spec["instance_count"]))
    while (job := client.get_job(spec["name"]))["status"] == "InProgress":
        time.sleep(0.01)
    seen = datetime.now(UTC)
    assert job["status"] == "Completed", job
    completed = datetime.fromisoformat(job["transitions"][-1]["start_time"])
    training, billable = _billing(job)
    spot = bool(spec.get("use_spot_instances"))
    return {
        "name": spec["name"],
        "spot": spot,
        "exit_to_completed": (completed - exited).total_seconds(),
        "exit_to_seen": (seen - exited).total_seconds(),
        "training": training,
        "billable": billable,
        # As the SDK prints it (sagemaker.session.logs_for_job), and as Runyard stores it.
        "sdk_savings": f"{(1 - billable / training) * 100:.1f}%" if spot else "-",
        "stored_savings": (
            "-" if job["spot_savings_percent"] is None else f"{job['spot_savings_percent']:.1f}%"
        ),
    }


def _billing(job: dict[str, Any]) -> tuple[int, int]:
    """TrainingTimeInSeconds and BillableTimeInSeconds, as DescribeTrainingJob gives them."""
    start = datetime.fromisoformat(job["training_start_time"])
    end = datetime.fromisoformat(job["training_end_time"])
    return training_seconds(start, end), int(job["billable_seconds"])


if __name__ == "__main__":
    main()
