"""Sharded data parallelism in Runyard's model-parallel library, side by side on the same
4 processes (2 simulated instances x 2): replicated (DDP), sharded over all 4 ranks
(FSDP's full sharding: sharded_data_parallel_degree 4), and MiCS groups of 2 (degree 2:
one group per instance, replicated across the two). Prints, per layout, the model
states each rank holds (parameters + gradients + Adam state) and step throughput.

The layouts alternate in rounds, so drift on a shared machine hits each alike.

    .venv/bin/python bench/modelparallel_sharding.py [--rounds 2] [--steps 6] [--width 1024]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from dataparallel_common import launch, machine, report
from torch import nn

from libraries import modelparallel as smp

LAYOUTS = {
    "replicated (DDP)": {"ddp": True},
    "sharded over 4 (FSDP)": {"ddp": True, "sharded_data_parallel_degree": 4},
    "MiCS groups of 2": {"ddp": True, "sharded_data_parallel_degree": 2},
}
PROCESSES = 4


def model(width: int, depth: int) -> nn.Module:
    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth)
            )
            self.head = nn.Linear(width, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = x + block(x)
            return self.head(x)

    torch.manual_seed(0)
    return Stack()


def held_bytes(net: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    def size(tensor: torch.Tensor) -> int:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        return int(local.numel() * local.element_size())

    total = sum(size(p) + (size(p.grad) if p.grad is not None else 0) for p in net.parameters())
    for state in optimizer.state.values():
        total += sum(size(v) for v in state.values() if isinstance(v, torch.Tensor) and v.dim())
    return total


def worker(args: argparse.Namespace) -> None:
    smp.init(LAYOUTS[args.layout])
    wrapped = smp.DistributedModel(model(args.width, args.depth))
    optimizer = smp.DistributedOptimizer(torch.optim.Adam(wrapped.parameters(), lr=1e-4))

    @smp.step
    def train_step(net: smp.DistributedModel, x: torch.Tensor) -> torch.Tensor:
        loss = net(x).pow(2).mean()
        net.backward(loss)
        return loss

    x = torch.randn(args.batch, args.width)
    times = []
    for step in range(args.steps + 2):
        smp.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        train_step(wrapped, x)
        optimizer.step()
        smp.barrier()
        if step >= 2:  # the first steps allocate; they are not the steady state
            times.append(time.perf_counter() - start)
    if smp.rank() == 0:
        step_time = statistics.median(times)
        report(
            {
                "held_mib": held_bytes(wrapped.module, optimizer.optimizer) / 2**20,
                "samples_per_s": PROCESSES * args.batch / step_time,
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--layout", default="replicated (DDP)", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all layouts")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run")
    parser.add_argument("--width", type=int, default=1024, help="width of each block")
    parser.add_argument("--depth", type=int, default=4, help="blocks in the model")
    parser.add_argument("--batch", type=int, default=16, help="samples per rank per step")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    parameters = sum(p.numel() for p in model(args.width, args.depth).parameters())
    print(f"{machine()}; model {parameters / 1e6:.1f}M parameters, {PROCESSES} processes")
    results: dict[str, list[dict[str, float]]] = {layout: [] for layout in LAYOUTS}
    passed = [
        f"--{k}={v}" for k, v in vars(args).items() if k in ("steps", "width", "depth", "batch")
    ]
    for _ in range(args.rounds):
        for layout in LAYOUTS:
            results[layout].append(
                launch(Path(__file__), PROCESSES, [f"--layout={layout}", *passed])
            )
    base = results["replicated (DDP)"]
    base_memory = base[0]["held_mib"]
    base_speed = statistics.median(r["samples_per_s"] for r in base)
    print(f"{'layout':<24}{'states/rank':>14}{'vs DDP':>9}{'samples/s':>12}{'vs DDP':>9}")
    for layout, runs in results.items():
        memory = runs[0]["held_mib"]
        speed = statistics.median(r["samples_per_s"] for r in runs)
        print(
            f"{layout:<24}{memory:>10.1f} MiB{memory / base_memory:>8.2f}x"
            f"{speed:>12.1f}{speed / base_speed:>8.2f}x"
        )


if __name__ == "__main__":
    main()
