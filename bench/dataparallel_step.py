"""Training-step throughput of a ~25M-parameter model under Runyard data parallel against
torch's DistributedDataParallel on the same processes, and weak scaling 1 -> 2 -> 4.

Every process trains on its own batch of fixed size (weak scaling): throughput is the
job's samples per second. The two implementations alternate in rounds on the same
processes, so drift on a shared machine hits both. 2 processes run as 2 instances x 1,
4 as 2 instances x 2 (RUNYARD_HOST), over this machine's loopback or, with
``--link-gbit``, each instance in a network namespace of its own on a link shaped to that
rate (dataparallel_common.py; root only). On CPU each rank gets one thread: with fewer
cores than ranks, scaling measures the core count as much as the library.

    .venv/bin/python bench/dataparallel_step.py [--procs 1,2,4] [--batch 32] [--steps 6]
        [--compression bf16] [--link-gbit 10]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from dataparallel_common import (
    launch,
    link_label,
    machine,
    report,
    synchronize,
    usable_process_counts,
    worker_device,
)
from torch import nn

from libraries import dataparallel as dp

IMPLEMENTATIONS = ("torch", "runyard")


def model_25m(width: int) -> nn.Module:
    """1024 -> 4096 -> 4096 -> 1024 -> 10 at width 4096: 25.2M parameters."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(1024, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 1024),
        nn.ReLU(),
        nn.Linear(1024, 10),
    )


def wrap(implementation: str, model: nn.Module, compression: str | None) -> nn.Module:
    if implementation == "runyard":
        return dp.DistributedDataParallel(model, compression=compression)  # type: ignore[arg-type]
    return nn.parallel.DistributedDataParallel(model)


def seconds_for_steps(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], warmup: int, steps: int
) -> float:
    """Wall time of ``steps`` optimizer steps on the slowest rank."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    device = batch[0].device

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    synchronize(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item())


def worker(args: argparse.Namespace) -> None:
    dp.init_process_group()
    device = worker_device()
    world = dp.get_world_size()
    generator = torch.Generator().manual_seed(dp.get_rank())
    inputs = torch.randn(args.batch, 1024, generator=generator).to(device)
    labels = torch.randint(0, 10, (args.batch,), generator=generator).to(device)
    times: dict[str, list[float]] = {name: [] for name in IMPLEMENTATIONS}
    for _ in range(args.rounds):
        for name in IMPLEMENTATIONS:
            model = wrap(name, model_25m(args.width).to(device), args.compression)
            times[name].append(seconds_for_steps(model, (inputs, labels), args.warmup, args.steps))
            del model
            gc.collect()
    if dp.get_rank() == 0:
        parameters = sum(p.numel() for p in model_25m(args.width).parameters())
        report(
            {
                "parameters": parameters,
                **{
                    name: world * args.batch * args.steps / statistics.median(seconds)
                    for name, seconds in times.items()
                },
            }
        )
    dist.barrier()
    dp.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="1,2,4")
    parser.add_argument("--batch", type=int, default=32, help="samples per process per step")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--compression", choices=["fp16", "bf16"], default=None)
    parser.add_argument(
        "--link-gbit",
        type=float,
        default=None,
        help="instances in network namespaces of their own, each link shaped to this rate",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    forwarded = [
        "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
        "--rounds", str(args.rounds), "--width", str(args.width),
        *(["--compression", args.compression] if args.compression else []),
    ]  # fmt: skip
    results = {
        processes: launch(Path(__file__), processes, forwarded, link_gbit=args.link_gbit)
        for processes in usable_process_counts([int(p) for p in args.procs.split(",")])
    }
    parameters = next(iter(results.values()))["parameters"]
    print(
        f"machine: {machine()}; model: {parameters / 1e6:.1f}M parameters; "
        f"batch {args.batch} per process; compression: {args.compression or 'none'}; "
        f"link: {link_label(args.link_gbit)}"
    )
    print(
        f"{'procs':>5} | {'torch DDP':>14} | {'Runyard DP':>14} | {'Runyard/torch':>13} | "
        f"{'weak scaling torch':>18} | {'weak scaling Runyard':>20}"
    )
    # At one process both run the same computation (nothing to reduce), so one baseline
    # for both: their mean, which halves the noise of either.
    base = statistics.mean(results[1][name] for name in IMPLEMENTATIONS) if 1 in results else None
    for processes, row in results.items():
        scaling = {
            name: f"{row[name] / (processes * base):.0%}" if base else "n/a"
            for name in IMPLEMENTATIONS
        }
        print(
            f"{processes:>5} | {row['torch']:8.1f} smp/s | {row['runyard']:8.1f} smp/s | "
            f"{row['runyard'] / row['torch']:12.2f}x | {scaling['torch']:>18} | "
            f"{scaling['runyard']:>20}"
        )


if __name__ == "__main__":
    main()
