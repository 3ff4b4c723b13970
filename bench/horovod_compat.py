"""Training steps per second of a Horovod PyTorch script on Runyard's ``horovod.torch``
against the same model under torch's DistributedDataParallel, on the same processes.

Two models: the Horovod example (examples/horovod-pytorch: 32 -> 64 -> 4, so
each step is mostly the collective's latency) and an MLP of ``--width`` (1024 -> W -> W ->
1024 -> 10; 7.4M parameters at 2048, so mostly bytes). Every process trains on its own
batch of ``--batch`` samples (weak scaling). The implementations alternate in rounds on
the same processes, so drift on a shared machine hits all of them. 2 processes run as 2
instances x 1, 4 as 2 instances x 2 (RUNYARD_HOST), as in dataparallel_step.py.

    .venv/bin/python bench/horovod_compat.py [--procs 2,4] [--batch 32] [--steps 20]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from dataparallel_common import launch, machine, report
from torch import nn

from libraries import horovod as hvd

IMPLEMENTATIONS = ("torch DDP", "horovod", "horovod fp16")


def example_model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


def mlp(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(1024, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 1024),
        nn.ReLU(),
        nn.Linear(1024, 10),
    )


def trainer(name: str, model: nn.Module) -> tuple[nn.Module, torch.optim.Optimizer]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if name == "torch DDP":
        return nn.parallel.DistributedDataParallel(model), optimizer
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    compression = hvd.Compression.fp16 if name == "horovod fp16" else hvd.Compression.none
    return model, hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression
    )


def seconds_for_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor],
    warmup: int,
    steps: int,
) -> float:
    """Wall time of ``steps`` optimizer steps on the slowest rank."""

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    hvd.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
    return float(hvd.allreduce(elapsed, op=hvd.Max).item())


def worker(args: argparse.Namespace) -> None:
    hvd.init()
    torch.set_num_threads(1)
    models: dict[str, tuple[Callable[[], nn.Module], int]] = {
        "example": (example_model, 32),
        "mlp": (lambda: mlp(args.width), 1024),
    }
    found: dict[str, dict[str, float]] = {}
    for label, (make, features) in models.items():
        generator = torch.Generator().manual_seed(hvd.rank())
        inputs = torch.randn(args.batch, features, generator=generator)
        labels = torch.randint(0, 4, (args.batch,), generator=generator)
        steps = args.steps if label == "example" else max(args.steps // 4, 3)
        times: dict[str, list[float]] = {name: [] for name in IMPLEMENTATIONS}
        for _ in range(args.rounds):
            for name in IMPLEMENTATIONS:
                torch.manual_seed(0)
                model, optimizer = trainer(name, make())
                seconds = seconds_for_steps(model, optimizer, (inputs, labels), 2, steps)
                times[name].append(seconds)
                del model, optimizer
                gc.collect()
        found[label] = {name: steps / statistics.median(s) for name, s in times.items()}
        found[label]["parameters"] = sum(p.numel() for p in make().parameters())
    if hvd.rank() == 0:
        report(found)
    hvd.barrier()
    hvd.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="2,4")
    parser.add_argument("--batch", type=int, default=32, help="samples per process per step")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    forwarded = [
        "--batch", str(args.batch), "--steps", str(args.steps), "--rounds", str(args.rounds),
        "--width", str(args.width),
    ]  # fmt: skip
    results = {
        processes: launch(Path(__file__), processes, forwarded)
        for processes in [int(p) for p in args.procs.split(",")]
    }
    print(f"machine: {machine()}; batch {args.batch} per process")
    print(
        f"{'model':>16} | {'procs':>5} | {'torch DDP':>11} | {'horovod':>11} | "
        f"{'horovod fp16':>12} | {'horovod/DDP':>11}"
    )
    for processes, rows in results.items():
        for label, row in rows.items():
            name = f"{label} ({row['parameters'] / 1e6:.2g}M)"
            print(
                f"{name:>16} | {processes:>5} | {row['torch DDP']:7.1f} st/s | "
                f"{row['horovod']:7.1f} st/s | {row['horovod fp16']:8.1f} st/s | "
                f"{row['horovod'] / row['torch DDP']:10.2f}x"
            )


if __name__ == "__main__":
    main()
