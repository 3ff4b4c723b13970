"""Bus bandwidth of Runyard's hierarchical sharded reduction against
torch.distributed.all_reduce, on the same processes and buffers.

2 processes run as 2 instances x 1, 4 as 2 instances x 2 (RUNYARD_HOST), all on this
machine. Each figure is the median over iterations of the slowest rank's time; bus
bandwidth = bytes x 2(n-1)/n / time, the usual convention for an allreduce.

    .venv/bin/python bench/dataparallel_allreduce.py [--sizes-mb 1,4,16,64,256] [--procs 2,4]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
from dataparallel_common import (
    launch,
    machine,
    report,
    synchronize,
    usable_process_counts,
    worker_device,
)

from runtime import dataparallel as dp
from runtime.dataparallel.process_group import hierarchy_groups
from runtime.dataparallel.sharded_reduce import (
    SHARD_EXCHANGES,
    ShardedReducer,
    default_shard_exchange,
)

MB = 2**20


def iterations_for(size_mb: int, budget_mb: int) -> int:
    return max(3, min(20, budget_mb // size_mb))


def timed(operation: Callable[[], object], device: torch.device, iterations: int) -> float:
    """Median seconds per call, each call timed on the slowest rank."""
    operation()  # warm-up: connections, allocator
    times = []
    for _ in range(iterations):
        dist.barrier()
        synchronize(device)
        started = time.perf_counter()
        operation()
        synchronize(device)
        elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
        dist.all_reduce(elapsed.to(device), op=dist.ReduceOp.MAX)
        times.append(float(elapsed.max()))
    return statistics.median(times)


def worker(
    sizes_mb: list[int], budget_mb: int, compression: str | None, exchange: str | None
) -> None:
    dp.init_process_group()
    device = worker_device()
    reducer = ShardedReducer(
        hierarchy_groups(),
        compression=compression,  # type: ignore[arg-type]
        shard_exchange=exchange or default_shard_exchange(device),  # type: ignore[arg-type]
    )
    results = []
    for size_mb in sizes_mb:
        tensor = torch.randn(size_mb * MB // 4, device=device)
        iterations = iterations_for(size_mb, budget_mb)
        runyard = timed(partial(reducer.average_, tensor), device, iterations)
        plain = timed(partial(dist.all_reduce, tensor, op=dist.ReduceOp.AVG), device, iterations)
        results.append({"size_mb": size_mb, "torch": plain, "runyard": runyard})
    if dp.get_rank() == 0:
        report(results)
    dist.barrier()
    dp.destroy_process_group()


def bus_bandwidth(size_mb: int, processes: int, seconds: float) -> float:
    return size_mb * MB * 2 * (processes - 1) / processes / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="1,4,16,64,256")
    parser.add_argument("--procs", default="2,4")
    parser.add_argument(
        "--budget-mb", type=int, default=128, help="iterations per size: budget / size, 3..20"
    )
    parser.add_argument("--compression", choices=["fp16", "bf16"], default=None)
    parser.add_argument(
        "--exchange", choices=SHARD_EXCHANGES, default=None, help="default: by device"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes_mb.split(",")]
    if args.worker:
        worker(sizes, args.budget_mb, args.compression, args.exchange)
        return

    print(
        f"machine: {machine()}; compression: {args.compression or 'none'}; "
        f"exchange: {args.exchange or 'default for the device'}"
    )
    print(
        f"{'size':>7} {'procs':>5} | {'torch all_reduce':>22} | {'Runyard sharded':>22} | "
        f"{'Runyard/torch':>13}"
    )
    forwarded = [
        "--sizes-mb", args.sizes_mb, "--budget-mb", str(args.budget_mb),
        *(["--compression", args.compression] if args.compression else []),
        *(["--exchange", args.exchange] if args.exchange else []),
    ]  # fmt: skip
    for processes in usable_process_counts([int(p) for p in args.procs.split(",")]):
        for row in launch(Path(__file__), processes, forwarded):
            size = row["size_mb"]
            torch_bw = bus_bandwidth(size, processes, row["torch"])
            runyard_bw = bus_bandwidth(size, processes, row["runyard"])
            print(
                f"{size:>4} MB {processes:>5} | "
                f"{row['torch'] * 1e3:8.1f} ms {torch_bw:7.2f} GB/s | "
                f"{row['runyard'] * 1e3:8.1f} ms {runyard_bw:7.2f} GB/s | "
                f"{runyard_bw / torch_bw:12.2f}x"
            )


if __name__ == "__main__":
    main()
