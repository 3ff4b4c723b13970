"""Pipeline stages on a transformers GPT-2 (from a config; input and output embeddings
tied), 2 processes, 2 stages, the interleaved (1F1B) schedule, side by side in one run:

- Runyard's library driven as the seed's ``train_gpt_simple.py`` drives SageMaker's
  (``model(input_ids=..., attention_mask=..., labels=input_ids)["loss"]`` in an
  ``@smp.step``, the tied embedding's copies kept as one), against torch's pipelining
  driven directly on the same model and split (its loss function computing the same loss
  from the last stage's logits, the embedding's copies left apart);
- the automatic partition against every manual split of the blocks (``smp.set_partition``).

Prints samples per second and CPU seconds per step (both processes together).

    .venv/bin/python bench/modelparallel_transformers.py [--steps 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
import transformers
from dataparallel_common import launch, machine, report
from torch.distributed.pipelining import Schedule1F1B, SplitPoint, pipeline

from libraries import modelparallel as smp

PROCESSES = 2


def gpt2(args: argparse.Namespace) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=args.layers,
        n_embd=args.width,
        n_head=8,
        n_positions=args.sequence,
        vocab_size=args.vocabulary,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    return transformers.GPT2LMHeadModel(config)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(args: argparse.Namespace) -> None:
    model = gpt2(args)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocabulary, (args.batch, args.sequence), generator=generator)
    mask = torch.ones_like(ids)
    if args.runner == "torch":
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        microbatch = ids.chunk(args.microbatches)[0]
        pipe = pipeline(
            model,
            mb_args=(microbatch,),
            split_spec={f"transformer.h.{args.layers // 2}": SplitPoint.BEGINNING},
        )
        stage = pipe.build_stage(rank, torch.device("cpu"))

        def causal_loss(output: object, target: torch.Tensor) -> torch.Tensor:
            logits = output[0] if isinstance(output, tuple) else output
            shifted = logits[:, :-1].reshape(-1, logits.shape[-1])  # type: ignore[index]
            return F.cross_entropy(shifted.float(), target[:, 1:].reshape(-1))

        schedule = Schedule1F1B(stage, n_microbatches=args.microbatches, loss_fn=causal_loss)
        optimizer = torch.optim.Adam(stage.submod.parameters(), lr=1e-4)

        def one_step() -> None:
            optimizer.zero_grad()
            if rank == 0:
                schedule.step(ids)
            else:
                schedule.step(target=ids)
            optimizer.step()
    else:
        config: dict[str, object] = {
            "partitions": 2,
            "microbatches": args.microbatches,
            "auto_partition": args.cut == "auto",
            "optimize": args.optimize,
        }
        smp.init(config)
        if args.cut != "auto":
            for block in list(model.transformer.h)[int(args.cut) :]:
                smp.set_partition(block, 1)
            smp.set_partition(model.transformer.ln_f, 1)
            smp.set_partition(model.lm_head, 1)
        rank = smp.rank()
        wrapped = smp.DistributedModel(model)
        optimizer = smp.DistributedOptimizer(torch.optim.Adam(wrapped.parameters(), lr=1e-4))

        @smp.step
        def train_step(
            net: smp.DistributedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
        ) -> torch.Tensor:
            loss = net(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]
            net.backward(loss)
            return loss

        def one_step() -> None:
            optimizer.zero_grad()
            train_step(wrapped, ids, mask)
            optimizer.step()

    times, cpu = [], []
    for step in range(args.steps + 2):
        dist.barrier()
        start, used = time.perf_counter(), cpu_seconds()
        one_step()
        dist.barrier()
        if step >= 2:  # the first step splits the model and warms up
            times.append(time.perf_counter() - start)
            cpu.append(cpu_seconds() - used)
    both: list[float] = [0.0] * PROCESSES
    dist.all_gather_object(both, statistics.median(cpu))
    if rank == 0:
        points = [] if args.runner == "torch" else wrapped.pipeline.points  # type: ignore[union-attr]
        report(
            {
                "samples_per_s": args.batch / statistics.median(times),
                "cpu_s": sum(both),
                "points": points,
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runner", default="runyard", help=argparse.SUPPRESS)
    parser.add_argument("--cut", default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--microbatches", type=int, default=4, help="microbatches per step")
    parser.add_argument(
        "--optimize",
        default="speed",
        choices=["speed", "memory"],
        help="what the auto partition balances (SageMaker's default is memory)",
    )
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every run")
    parser.add_argument("--layers", type=int, default=6, help="GPT-2 blocks")
    parser.add_argument("--width", type=int, default=256, help="GPT-2 width (n_embd)")
    parser.add_argument("--sequence", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--vocabulary", type=int, default=8192, help="vocabulary size")
    parser.add_argument("--batch", type=int, default=16, help="sequences per step")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print(
        f"{machine()}; GPT-2 of {args.layers} blocks x {args.width}, vocabulary "
        f"{args.vocabulary}, {args.sequence} tokens; {PROCESSES} stages, "
        f"{args.microbatches} microbatches, batch {args.batch}"
    )
    passed = [
        f"--{key}={value}"
        for key, value in vars(args).items()
        if key
        in (
            "microbatches",
            "optimize",
            "steps",
            "layers",
            "width",
            "sequence",
            "vocabulary",
            "batch",
        )
    ]
    half = str(args.layers // 2)
    runs = {
        "torch, direct": ["--runner=torch"],
        f"runyard, stage 1 from block {half}": [f"--cut={half}"],
        "runyard, auto": ["--cut=auto"],
        **{
            f"runyard, stage 1 from block {cut}": [f"--cut={cut}"]
            for cut in range(1, args.layers)
            if str(cut) != half
        },
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, extra in runs.items():
            results[name].append(launch(Path(__file__), PROCESSES, [*extra, *passed]))
    speed = {n: statistics.median(r["samples_per_s"] for r in rs) for n, rs in results.items()}
    cpu = {n: statistics.median(r["cpu_s"] for r in rs) for n, rs in results.items()}
    print(f"{'run':<34}{'samples/s':>11}{'CPU s/step':>12}")
    for name in runs:
        print(f"{name:<34}{speed[name]:>11.2f}{cpu[name]:>12.2f}")
    same_split = speed[f"runyard, stage 1 from block {half}"] / speed["torch, direct"]
    print(f"runyard / torch on the same split (block {half}): {same_split:.2f}x")
    manual = [name for name in runs if name.startswith("runyard, stage 1")]
    best = max(manual, key=lambda name: speed[name])
    chosen = ", ".join(results["runyard, auto"][-1]["points"])
    print(
        f"auto (optimize={args.optimize}, stage 1 from {chosen}) / best manual "
        f"({best.removeprefix('runyard, ')}): {speed['runyard, auto'] / speed[best]:.2f}x"
    )


if __name__ == "__main__":
    main()
