"""Bus bandwidth of Runyard's hierarchical sharded reduction against
torch.distributed.all_reduce, on the same processes and buffers.

2 processes run as 2 instances x 1, 4 as 2 instances x 2 (RUNYARD_HOST), all on this
machine: over its loopback, or with ``--link-gbit`` each instance in a network namespace
of its own on a link shaped to that rate (dataparallel_common.py; root only). Each figure
is the median over iterations of the slowest rank's time, the columns taking turns call by
call; bus bandwidth = bytes x 2(n-1)/n / time, the usual convention for an allreduce.

    .venv/bin/python bench/dataparallel_allreduce.py [--sizes-mb 1,4,16,64,256] [--procs 2,4]
        [--compression none,bf16,fp16] [--link-gbit 10]

With compression, Runyard moves half the bytes and the torch column stays float32: the
ratio is what compressing buys over gloo's (or NCCL's) float32 allreduce. On loopback a
byte costs a memory copy, about what casting it costs, so there compression gains only
the CPU time the kernel would spend copying the other half; on a link slower than the
machine's copies it approaches the byte ratio.
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
    link_label,
    machine,
    report,
    synchronize,
    usable_process_counts,
    worker_device,
)

from libraries import dataparallel as dp
from libraries.dataparallel.process_group import hierarchy_groups
from libraries.dataparallel.sharded_reduce import (
    SHARD_EXCHANGES,
    ShardedReducer,
    default_shard_exchange,
)

MB = 2**20


def iterations_for(size_mb: float, budget_mb: int) -> int:
    return max(3, min(20, int(budget_mb / size_mb)))


def timed(
    operations: dict[str, Callable[[], object]], device: torch.device, iterations: int
) -> dict[str, float]:
    """Median seconds per call of each operation, each call timed on the slowest rank.
    The operations take turns, call by call, so that drift on a shared machine (other
    work starting or stopping) hits them all alike."""
    for operation in operations.values():
        operation()  # warm-up: connections, allocator, scratch buffers
    times: dict[str, list[float]] = {name: [] for name in operations}
    for _ in range(iterations):
        for name, operation in operations.items():
            dist.barrier()
            synchronize(device)
            started = time.perf_counter()
            operation()
            synchronize(device)
            elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
            dist.all_reduce(elapsed.to(device), op=dist.ReduceOp.MAX)
            times[name].append(float(elapsed.max()))
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def worker(
    sizes_mb: list[float], budget_mb: int, compressions: list[str], exchange: str | None
) -> None:
    dp.init_process_group()
    device = worker_device()
    reducers = {
        name: ShardedReducer(
            hierarchy_groups(),
            compression=None if name == "none" else name,  # type: ignore[arg-type]
            shard_exchange=exchange or default_shard_exchange(device),  # type: ignore[arg-type]
        )
        for name in compressions
    }
    results = []
    for size_mb in sizes_mb:
        tensor = torch.randn(int(size_mb * MB) // 4, device=device)
        iterations = iterations_for(size_mb, budget_mb)
        operations: dict[str, Callable[[], object]] = {
            "torch": partial(dist.all_reduce, tensor, op=dist.ReduceOp.AVG),
            **{name: partial(reducer.average_, tensor) for name, reducer in reducers.items()},
        }
        results.append({"size_mb": size_mb, **timed(operations, device, iterations)})
    if dp.get_rank() == 0:
        report(results)
    dist.barrier()
    dp.destroy_process_group()


def bus_bandwidth(size_mb: float, processes: int, seconds: float) -> float:
    return size_mb * MB * 2 * (processes - 1) / processes / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="1,4,16,64,256")
    parser.add_argument("--procs", default="2,4")
    parser.add_argument(
        "--budget-mb", type=int, default=128, help="iterations per size: budget / size, 3..20"
    )
    parser.add_argument(
        "--compression",
        default="none",
        help="comma-separated, each one column: none, fp16, bf16 (the wire's type)",
    )
    parser.add_argument(
        "--exchange", choices=SHARD_EXCHANGES, default=None, help="default: by device"
    )
    parser.add_argument(
        "--link-gbit",
        type=float,
        default=None,
        help="instances in network namespaces of their own, each link shaped to this rate",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [float(size) for size in args.sizes_mb.split(",")]
    compressions = args.compression.split(",")
    if unknown := set(compressions) - {"none", "fp16", "bf16"}:
        parser.error(f"--compression: unknown {sorted(unknown)}")
    if args.worker:
        worker(sizes, args.budget_mb, compressions, args.exchange)
        return

    print(
        f"machine: {machine()}; link: {link_label(args.link_gbit)}; "
        f"exchange: {args.exchange or 'default for the device'}"
    )
    print(
        f"{'size':>8} {'procs':>5} | {'torch all_reduce fp32':>22} | "
        + " | ".join(f"{'Runyard ' + name:>22} {'/torch':>6}" for name in compressions)
    )
    forwarded = [
        "--sizes-mb", args.sizes_mb, "--budget-mb", str(args.budget_mb),
        "--compression", args.compression,
        *(["--exchange", args.exchange] if args.exchange else []),
    ]  # fmt: skip
    for processes in usable_process_counts([int(p) for p in args.procs.split(",")]):
        for row in launch(Path(__file__), processes, forwarded, link_gbit=args.link_gbit):
            size = row["size_mb"]
            torch_bw = bus_bandwidth(size, processes, row["torch"])
            cells = []
            for name in compressions:
                runyard_bw = bus_bandwidth(size, processes, row[name])
                cells.append(
                    f"{row[name] * 1e3:8.1f} ms {runyard_bw:7.2f} GB/s "
                    f"{runyard_bw / torch_bw:5.2f}x"
                )
            print(
                f"{size:>5g} MB {processes:>5} | "
                f"{row['torch'] * 1e3:8.1f} ms {torch_bw:7.2f} GB/s | " + " | ".join(cells)
            )


if __name__ == "__main__":
    main()
