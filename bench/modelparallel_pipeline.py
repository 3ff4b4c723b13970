"""Pipeline stages in Runyard's model-parallel library on 2 processes (2 stages): the
``simple`` (GPipe) and ``interleaved`` (1F1B) schedules through ``@smp.step``, each
against torch's own schedule driven directly on the same split, side by side in one run.
Prints step throughput and each stage's idle fraction (the bubble: the share of a step a
stage spends waiting rather than computing). Then, on a model of uneven blocks, the
automatic partition against every manual split of it (``smp.set_partition``).

    .venv/bin/python bench/modelparallel_pipeline.py [--microbatches 8] [--steps 8]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from dataparallel_common import launch, machine, report
from torch import nn
from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, SplitPoint, pipeline

from libraries import modelparallel as smp

PROCESSES = 2
SCHEDULES = {"simple": ScheduleGPipe, "interleaved": Schedule1F1B}


# The uneven model's blocks: (hidden width of each block's MLP) x its compute.
UNEVEN = (2048, 256, 256, 256, 1024, 256, 256, 2048)


class Stack(nn.Module):
    def __init__(self, width: int, depth: int, hidden: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, inner), nn.GELU(), nn.Linear(inner, width))
            for inner in (hidden or (width,) * depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


def compute_alone(stage: nn.Module, args: argparse.Namespace) -> float:
    """Seconds this stage computes in one step with nothing to wait for: forward and
    backward of every microbatch, run back to back on the stage alone."""
    inputs = torch.randn(args.batch // args.microbatches, args.width, requires_grad=True)
    started = time.perf_counter()
    for _ in range(args.microbatches):
        output = stage(inputs)
        output = output[0] if isinstance(output, tuple) else output
        output.pow(2).mean().backward()
    return time.perf_counter() - started


def worker(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    model = Stack(args.width, args.depth)
    x = torch.randn(args.batch, args.width)
    if args.runner == "torch":
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        microbatch = x.chunk(args.microbatches)[0]
        pipe = pipeline(
            model,
            mb_args=(microbatch,),
            split_spec={f"blocks.{args.depth // 2}": SplitPoint.BEGINNING},
        )
        stage = pipe.build_stage(rank, torch.device("cpu"))
        schedule = SCHEDULES[args.schedule](
            stage, n_microbatches=args.microbatches, loss_fn=lambda out, _: out.pow(2).mean()
        )
        optimizer = torch.optim.SGD(stage.submod.parameters(), lr=1e-4)

        def one_step() -> None:
            optimizer.zero_grad()
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=torch.zeros(args.batch, 1))
            optimizer.step()
    else:
        config = {"partitions": 2, "microbatches": args.microbatches, "pipeline": args.schedule}
        if args.cut != "none":
            model = Stack(args.width, len(UNEVEN), UNEVEN)
            config["auto_partition"] = args.cut == "auto"
        smp.init(config)
        if args.cut not in ("none", "auto"):
            for block in list(model.blocks)[int(args.cut) :]:
                smp.set_partition(block, 1)
        rank = smp.rank()
        wrapped = smp.DistributedModel(model)
        optimizer = smp.DistributedOptimizer(torch.optim.SGD(wrapped.parameters(), lr=1e-4))

        @smp.step
        def train_step(net: smp.DistributedModel, batch: torch.Tensor) -> torch.Tensor:
            loss = net(batch).pow(2).mean()
            net.backward(loss)
            return loss

        def one_step() -> None:
            optimizer.zero_grad()
            train_step(wrapped, x)
            optimizer.step()

    times = []
    for step in range(args.steps + 2):
        dist.barrier()
        start = time.perf_counter()
        one_step()
        dist.barrier()
        if step >= 2:  # the first step splits the model and warms up
            times.append(time.perf_counter() - start)
    own = stage.submod if args.runner == "torch" else wrapped.pipeline.module  # type: ignore[union-attr]
    alone = statistics.median(compute_alone(own, args) for _ in range(3))
    shares: list[float] = [0.0] * PROCESSES
    dist.all_gather_object(shares, max(1 - alone / statistics.median(times), 0.0))
    if rank == 0:
        report({"samples_per_s": args.batch / statistics.median(times), "idle": shares})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runner", default="runyard", help=argparse.SUPPRESS)
    parser.add_argument("--schedule", default="interleaved", help=argparse.SUPPRESS)
    parser.add_argument("--cut", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--microbatches", type=int, default=8, help="microbatches per step")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every run")
    parser.add_argument("--width", type=int, default=512, help="width of each block")
    parser.add_argument("--depth", type=int, default=8, help="blocks in the model")
    parser.add_argument("--batch", type=int, default=256, help="samples per step")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print(f"{machine()}; {PROCESSES} stages, {args.microbatches} microbatches, batch {args.batch}")
    passed = [
        f"--{key}={value}"
        for key, value in vars(args).items()
        if key in ("microbatches", "steps", "width", "depth", "batch")
    ]
    runs = [(schedule, runner) for schedule in SCHEDULES for runner in ("torch", "runyard")]
    results: dict[tuple[str, str], list[dict[str, object]]] = {run: [] for run in runs}
    for _ in range(args.rounds):
        for schedule, runner in runs:
            try:
                result = launch(
                    Path(__file__),
                    PROCESSES,
                    [f"--runner={runner}", f"--schedule={schedule}", *passed],
                )
            except SystemExit:
                print(f"the {runner} run of the {schedule} schedule failed")
                raise
            results[(schedule, runner)].append(result)
    print(f"{'schedule':<13}{'runner':<9}{'samples/s':>11}{'vs torch':>10}   idle per stage")
    for schedule, runner in runs:
        speed = statistics.median(float(r["samples_per_s"]) for r in results[(schedule, runner)])  # type: ignore[arg-type]
        torch_speed = statistics.median(
            float(r["samples_per_s"])
            for r in results[(schedule, "torch")]  # type: ignore[arg-type]
        )
        idle = results[(schedule, runner)][-1]["idle"]
        shares = " ".join(f"{share:.0%}" for share in idle)  # type: ignore[attr-defined]
        print(f"{schedule:<13}{runner:<9}{speed:>11.1f}{speed / torch_speed:>9.2f}x   {shares}")
    compare_splits(args, passed)


def compare_splits(args: argparse.Namespace, passed: list[str]) -> None:
    """The automatic partition against every manual split of the uneven model."""
    cuts = ["auto", *(str(cut) for cut in range(1, len(UNEVEN)))]
    speeds: dict[str, list[float]] = {cut: [] for cut in cuts}
    for _ in range(args.rounds):
        for cut in cuts:
            result = launch(Path(__file__), PROCESSES, [f"--cut={cut}", *passed])
            speeds[cut].append(float(result["samples_per_s"]))
    medians = {cut: statistics.median(values) for cut, values in speeds.items()}
    best = max((cut for cut in cuts if cut != "auto"), key=lambda cut: medians[cut])
    print(f"uneven blocks (MLP widths {', '.join(map(str, UNEVEN))}), interleaved:")
    print(f"{'split':<22}{'samples/s':>11}")
    for cut in cuts:
        name = "auto" if cut == "auto" else f"stage 1 from block {cut}"
        print(f"{name:<22}{medians[cut]:>11.1f}")
    print(f"auto / best manual (block {best}): {medians['auto'] / medians[best]:.2f}x")


if __name__ == "__main__":
    main()
