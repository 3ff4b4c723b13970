"""Consecutive 2-instance jobs of each kind, one after the other, each checked: Completed,
not late, and nothing of it left behind once it is torn down.

Kinds (each on a fresh `runyard server` of its own, in a temporary RUNYARD_HOME):

  torch_distributed   a plain DDP script as SageMaker users write it (env:// rendezvous,
                      3 epochs, a metric all-reduced each epoch, rank 0 saves, barrier(),
                      destroy_process_group()), on the embedded defaults
  pytorchddp          the same script under mpirun, 1 process per host
  mpi                 an mpi4py allreduce under mpirun, 2 processes per host
  plain               a script on each instance, no distribution
  torch_distributed_pg  the DDP script on PostgreSQL + Redis (--postgres, --redis)

Late: the job read Completed (the start of its last transition) more than --late seconds
after its last instance exited. Two figures: from the exit of the last instance's runtime,
watched in /proc (the local backend's pid file names each instance's leader), and from the
job's describe alone, from the last of its instances' final reports (``reported_at``).

Left behind, once its teardown has had --teardown seconds: a process carrying the job's
marker, a network namespace or nftables table of the job's, its bridge, its directory
under RUNYARD_HOME/jobs.

    .venv/bin/python bench/soak_jobs.py [--runs 5] [--kinds torch_distributed,mpi,...]
        [--postgres postgresql://postgres@127.0.0.1:5432/test]
        [--redis redis://127.0.0.1:6379/0] [--late 2] [--teardown 60] [--python PATH]

A local instance's runtime imports Runyard as the server's interpreter finds it installed
(PYTHONPATH does not reach it): --python names an interpreter that finds the checkout to
measure (a virtual environment whose .pth puts it first).

Prints a line per job as it ends, then the counts and timings per kind; exits 1 if any job
failed a check. About 30 s a job on a quiet 2-core machine (100 of each: about an hour).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from _server import REPO, server_and_home

from runyard.client import Client, RunyardError

sys.path.insert(0, str(REPO))

from provisioning.local import network, processes
from tests import postgres
from tests.instance_exits import instance_leaders, last_exit

DDP_SCRIPT = """\
import argparse, os
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.Generator().manual_seed(1)
inputs, labels = torch.randn(1024, 32, generator=data), torch.randint(0, 4, (1024,), generator=data)
inputs, labels = inputs[rank::world], labels[rank::world]
for epoch in range(args.epochs):
    total = torch.zeros(2)
    for start in range(0, len(inputs), 64):
        optimizer.zero_grad()
        batch = slice(start, start + 64)
        loss = nn.functional.cross_entropy(model(inputs[batch]), labels[batch])
        loss.backward()
        optimizer.step()
        total += torch.tensor([loss.item() * 64, 64])
    dist.all_reduce(total)
    print(f"epoch {epoch + 1}/{args.epochs} rank {rank} loss {total[0] / total[1]:.4f}")
if rank == 0:
    torch.save(model.module.state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"))
dist.barrier()
dist.destroy_process_group()
"""

MPI_SCRIPT = """\
import os
from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
print(f"rank {comm.Get_rank()} of {comm.Get_size()} sum {total}", flush=True)
if comm.Get_rank() == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "sum.txt"), "w") as model:
        model.write(str(total))
"""

PLAIN_SCRIPT = """\
import os, time
print("training on", os.environ["SM_CURRENT_HOST"], flush=True)
time.sleep(1)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as model:
    model.write("trained")
"""


@dataclass(frozen=True)
class Kind:
    name: str
    entry_point: str
    distribution: dict[str, Any]
    on_postgres: bool = False


KINDS = {
    kind.name: kind
    for kind in (
        Kind("torch_distributed", "ddp.py", {"torch_distributed": {"enabled": True}}),
        Kind("pytorchddp", "ddp.py", {"pytorchddp": {"enabled": True}}),
        Kind("mpi", "mpi.py", {"mpi": {"enabled": True, "processes_per_host": 2}}),
        Kind("plain", "plain.py", {}),
        Kind(
            "torch_distributed_pg",
            "ddp.py",
            {"torch_distributed": {"enabled": True}},
            on_postgres=True,
        ),
    )
}


@dataclass
class Outcome:
    name: str
    status: str
    exit_to_completed: float | None = None
    report_to_completed: float | None = None
    teardown: float | None = None
    left: list[str] = field(default_factory=list)
    why: str = ""

    def late(self, limit: float) -> bool:
        figures = [self.exit_to_completed, self.report_to_completed]
        return any(figure is not None and figure > limit for figure in figures)

    def passed(self, limit: float) -> bool:
        return self.status == "Completed" and not self.late(limit) and not self.left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="jobs of each kind")
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help="comma-separated, of " + ", ".join(KINDS)
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "RUNYARD_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
        help="an admin URL of a PostgreSQL server; a fresh database is made on it",
    )
    parser.add_argument(
        "--redis", default=os.environ.get("RUNYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--late", type=float, default=2.0, help="seconds: later is late")
    parser.add_argument("--teardown", type=float, default=60.0, help="seconds a teardown gets")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a job gets")
    parser.add_argument(
        "--python", type=Path, help="runs the server and its instances (this one by default)"
    )
    args = parser.parse_args()
    kinds = [KINDS[name] for name in args.kinds.split(",")]
    started, load = time.monotonic(), os.getloadavg()[0]
    results: dict[str, list[Outcome]] = {}
    with tempfile.TemporaryDirectory(prefix="runyard-soak-") as scratch:
        source = Path(scratch)
        for name, script in (
            ("ddp.py", DDP_SCRIPT),
            ("mpi.py", MPI_SCRIPT),
            ("plain.py", PLAIN_SCRIPT),
        ):
            (source / name).write_text(script)
        for kind in kinds:
            print(f"\n{kind.name}: {args.runs} jobs", flush=True)
            with _server(kind, args) as (client, home):
                source_uri = client.upload_source(source)
                results[kind.name] = [
                    _one(client, home, source_uri, kind, run, args) for run in range(args.runs)
                ]
    _summary(results, args, time.monotonic() - started, load)
    sys.exit(0 if all(o.passed(args.late) for r in results.values() for o in r) else 1)


@contextmanager
def _server(kind: Kind, args: argparse.Namespace) -> Iterator[tuple[Client, Path]]:
    if not kind.on_postgres:
        with server_and_home(python=args.python) as running:
            yield running
        return
    with postgres.empty_database(args.postgres, "runyard_soak") as database:
        settings = {
            "RUNYARD_DATABASE_URL": database,
            "RUNYARD_BROKER_URL": args.redis,
            "RUNYARD_QUEUE": f"soak-{os.getpid()}",
        }
        with server_and_home(settings, python=args.python) as running:
            yield running


def _one(
    client: Client, home: Path, source_uri: str, kind: Kind, run: int, args: argparse.Namespace
) -> Outcome:
    name = f"soak-{kind.name.replace('_', '-')}-{run}"
    began = time.monotonic()
    try:
        outcome = _measure(client, home, source_uri, kind, name, args)
    except (TimeoutError, RunyardError, OSError) as exc:
        outcome = Outcome(name, "Error", why=f"{type(exc).__name__}: {exc}")
    verdict = "ok" if outcome.passed(args.late) else "FAILED CHECK"
    print(
        f"  {run + 1:>4}/{args.runs} {name}: {outcome.status}, "
        f"exit->Completed {_seconds(outcome.exit_to_completed)}, "
        f"reports->Completed {_seconds(outcome.report_to_completed)}, "
        f"teardown {_seconds(outcome.teardown)}, "
        f"left {', '.join(outcome.left) or 'nothing'}, {time.monotonic() - began:.0f} s: {verdict}"
        + (f"\n        {outcome.why[:600]}" if outcome.why else ""),
        flush=True,
    )
    return outcome


def _measure(
    client: Client, home: Path, source_uri: str, kind: Kind, name: str, args: argparse.Namespace
) -> Outcome:
    job_id = client.create_job(
        {
            "name": name,
            "entry_point": kind.entry_point,
            "source_uri": source_uri,
            "instance_type": "local",
            "instance_count": 2,
            "distribution": kind.distribution,
            "hyperparameters": {"epochs": 3} if kind.entry_point == "ddp.py" else {},
        }
    )["id"]
    exited = last_exit(instance_leaders(home / "jobs" / job_id, 2), timeout=args.timeout)
    deadline = time.monotonic() + args.timeout
    while (job := client.get_job(name))["status"] in ("InProgress", "Stopping"):
        if time.monotonic() > deadline:
            client.stop_job(name)
            raise TimeoutError(f"{name} did not end within {args.timeout:.0f} s")
        time.sleep(0.05)
    seen = time.monotonic()
    outcome = Outcome(name, job["status"], why=job.get("failure_reason") or "")
    ended = datetime.fromisoformat(job["transitions"][-1]["start_time"])
    outcome.exit_to_completed = (ended - exited).total_seconds()
    reports = [datetime.fromisoformat(i["reported_at"]) for i in job["instances"]]
    if reports:
        outcome.report_to_completed = (ended - max(reports)).total_seconds()
    outcome.left = _wait_for(lambda: _left_behind(home, job_id), args.teardown)
    outcome.teardown = time.monotonic() - seen
    return outcome


def _left_behind(home: Path, job_id: str) -> list[str]:
    left = []
    if found := processes.marked_processes(job_id):
        left.append(f"processes {found}")
    if job_id in network.held_jobs():
        left.append("a network namespace or table")
    bridge = network.plan(job_id, []).bridge
    if Path("/sys/class/net", bridge).exists():
        left.append(f"bridge {bridge}")
    if (home / "jobs" / job_id).exists():
        left.append("its directory")
    return left


def _wait_for(left: Callable[[], list[str]], seconds: float) -> list[str]:
    """What is still left once nothing is, or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while (found := left()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def _summary(
    results: dict[str, list[Outcome]], args: argparse.Namespace, wall: float, load: float
) -> None:
    print(
        f"\n{args.runs} consecutive 2-instance jobs of each kind; late: over {args.late:g} s "
        f"(load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
        f"{os.cpu_count()} CPUs, {wall / 60:.1f} min):"
    )
    print(
        f"  {'kind':<22} {'jobs':>5} {'Completed':>9} {'late':>5} {'left':>5} "
        f"{'exit->Completed median/max':>27} {'reports->Completed median/max':>30}"
    )
    for name, outcomes in results.items():
        completed = sum(o.status == "Completed" for o in outcomes)
        late = sum(o.late(args.late) for o in outcomes)
        left = sum(bool(o.left) for o in outcomes)
        print(
            f"  {name:<22} {len(outcomes):>5} {completed:>9} {late:>5} {left:>5} "
            f"{_spread([o.exit_to_completed for o in outcomes]):>27} "
            f"{_spread([o.report_to_completed for o in outcomes]):>30}"
        )


def _spread(figures: list[float | None]) -> str:
    known = [figure for figure in figures if figure is not None]
    if not known:
        return "-"
    return f"{statistics.median(known):.2f} / {max(known):.2f} s"


def _seconds(figure: float | None) -> str:
    return "-" if figure is None else f"{figure:.2f} s"


if __name__ == "__main__":
    main()
