"""Runyard's model-parallel library on transformers GPT-2 and Llama built from their
library's default configurations (only sizes given: the key/value cache on,
``ModelOutput``s, sdpa attention, dropout and tied embeddings as shipped), 2 processes,
side by side in one run, for each family:

- pipeline stages (2 stages, the interleaved 1F1B schedule): Runyard's library driven as
  the seed's ``train_gpt_simple.py`` drives SageMaker's (``model(input_ids=...,
  attention_mask=..., labels=input_ids)["loss"]`` in an ``@smp.step``, GPT-2's tied
  embedding's copies kept as one), against torch's pipelining driven directly on the same
  model and split (the model called for its logits alone, without a cache, as
  ``torch.export`` needs; its loss function computing the same loss from the last stage's
  logits; the embedding's copies left apart);
- with ``--sweep``, the automatic partition against every manual split of the blocks
  (``smp.set_partition``);
- sharded data parallelism (``sharded_data_parallel_degree`` 2) against replicas
  (``ddp``) on the same global batch: the model states each rank holds (parameters,
  gradients, Adam's moments), whose goal is at most 1.1/d of a replica's.

Prints samples per second and CPU seconds per step (both processes together).

    .venv/bin/python bench/modelparallel_transformers.py [--families gpt2,llama]
        [--steps 6] [--rounds 2] [--sweep]
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
from modelparallel_sharding import held_bytes
from torch import nn
from torch.distributed.pipelining import Schedule1F1B, SplitPoint, pipeline

from libraries import modelparallel as smp

PROCESSES = 2
SHARD_DEGREE = 2
# Where each family keeps its blocks, and the modules after them (the last stage's).
BLOCKS = {"gpt2": "transformer.h", "llama": "model.layers"}
TAIL = {"gpt2": ("transformer.ln_f", "lm_head"), "llama": ("model.norm", "lm_head")}


def made(args: argparse.Namespace) -> nn.Module:
    """The family's causal language model from its default configuration, sizes given."""
    torch.manual_seed(0)
    if args.family == "gpt2":
        config: transformers.PretrainedConfig = transformers.GPT2Config(
            n_layer=args.layers,
            n_embd=args.width,
            n_head=8,
            n_positions=args.sequence,
            vocab_size=args.vocabulary,
            # GPT-2's one special token, moved into the shrunk vocabulary as its last.
            bos_token_id=args.vocabulary - 1,
            eos_token_id=args.vocabulary - 1,
        )
    else:
        config = transformers.LlamaConfig(
            num_hidden_layers=args.layers,
            hidden_size=args.width,
            intermediate_size=args.width * 8 // 3 // 64 * 64,
            num_attention_heads=8,
            max_position_embeddings=args.sequence,
            vocab_size=args.vocabulary,
        )
    return transformers.AutoModelForCausalLM.from_config(config)


class Logits(nn.Module):
    """The model as a hand-written torch pipeline takes it: token ids in, logits out,
    called without a key/value cache (``torch.export`` takes none among the outputs)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(input_ids=input_ids, use_cache=False).logits
        return logits


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(args: argparse.Namespace) -> None:
    model = made(args)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocabulary, (args.batch, args.sequence), generator=generator)
    mask = torch.ones_like(ids)
    wrapped: smp.DistributedModel | None = None
    if args.runner == "torch":
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        microbatch = ids.chunk(args.microbatches)[0]
        pipe = pipeline(
            Logits(model),
            mb_args=(microbatch,),
            split_spec={f"model.{BLOCKS[args.family]}.{args.layers // 2}": SplitPoint.BEGINNING},
        )
        stage = pipe.build_stage(rank, torch.device("cpu"))

        def causal_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            shifted = logits[:, :-1].reshape(-1, logits.shape[-1])
            return F.cross_entropy(shifted.float(), target[:, 1:].reshape(-1))

        schedule = Schedule1F1B(stage, n_microbatches=args.microbatches, loss_fn=causal_loss)
        optimizer: Any = torch.optim.Adam(stage.submod.parameters(), lr=1e-4)

        def one_step() -> None:
            optimizer.zero_grad()
            if rank == 0:
                schedule.step(ids)
            else:
                schedule.step(target=ids)
            optimizer.step()
    else:
        smp.init(_layout(args))
        if args.cut not in ("auto", "none"):
            for block in list(model.get_submodule(BLOCKS[args.family]))[int(args.cut) :]:
                smp.set_partition(block, 1)
            for name in TAIL[args.family]:
                smp.set_partition(model.get_submodule(name), 1)
        rank = smp.rank()
        wrapped = smp.DistributedModel(model)
        optimizer = smp.DistributedOptimizer(torch.optim.Adam(wrapped.parameters(), lr=1e-4))
        # Replicas and shards each step on their own rows of the global batch.
        share = args.batch // smp.dp_size()
        rows = slice(smp.dp_rank() * share, (smp.dp_rank() + 1) * share)

        @smp.step
        def train_step(
            net: smp.DistributedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
        ) -> torch.Tensor:
            loss = net(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]
            net.backward(loss)
            return loss

        def one_step() -> None:
            optimizer.zero_grad()
            train_step(wrapped, ids[rows], mask[rows])
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
    both: list[Any] = [None] * PROCESSES
    held = 0 if wrapped is None else held_bytes(wrapped.module, optimizer.optimizer)
    dist.all_gather_object(both, (statistics.median(cpu), held))
    if rank == 0:
        pipelined = wrapped is not None and wrapped.pipeline is not None
        report(
            {
                "samples_per_s": args.batch / statistics.median(times),
                "cpu_s": sum(used for used, _ in both),
                "held_mib": max(held for _, held in both) / 2**20,
                "points": wrapped.pipeline.points if pipelined else [],  # type: ignore[union-attr]
            }
        )


def _layout(args: argparse.Namespace) -> dict[str, object]:
    if args.runner == "replicated":
        return {"ddp": True, "microbatches": args.microbatches}
    if args.runner == "sharded":
        return {
            "ddp": True,
            "microbatches": args.microbatches,
            "sharded_data_parallel_degree": SHARD_DEGREE,
        }
    return {
        "partitions": 2,
        "microbatches": args.microbatches,
        "auto_partition": args.cut == "auto",
        "optimize": args.optimize,
    }


def _runs(args: argparse.Namespace) -> dict[str, list[str]]:
    half = str(args.layers // 2)
    runs = {
        "torch pipelining, direct": ["--runner=torch"],
        f"runyard, stage 1 from block {half}": ["--runner=runyard", f"--cut={half}"],
        "runyard, auto": ["--runner=runyard", "--cut=auto"],
    }
    if args.sweep:
        runs |= {
            f"runyard, stage 1 from block {cut}": ["--runner=runyard", f"--cut={cut}"]
            for cut in range(1, args.layers)
            if str(cut) != half
        }
    runs |= {
        "replicas (ddp)": ["--runner=replicated", "--cut=none"],
        f"sharded over {SHARD_DEGREE}": ["--runner=sharded", "--cut=none"],
    }
    return runs


def _family(args: argparse.Namespace, family: str) -> None:
    args.family = family
    whole = sum(p.numel() for p in made(args).parameters())
    print(
        f"\n{family}: {args.layers} blocks x {args.width}, vocabulary {args.vocabulary}, "
        f"{args.sequence} tokens, {whole / 1e6:.1f}M parameters; {PROCESSES} processes, "
        f"{args.microbatches} microbatches, global batch {args.batch}"
    )
    passed = [
        f"--{key}={value}"
        for key, value in vars(args).items()
        if key
        in (
            "family",
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
    runs = _runs(args)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, extra in runs.items():
            results[name].append(launch(Path(__file__), PROCESSES, [*extra, *passed]))
    speed = {n: statistics.median(r["samples_per_s"] for r in rs) for n, rs in results.items()}
    cpu = {n: statistics.median(r["cpu_s"] for r in rs) for n, rs in results.items()}
    held = {n: rs[0]["held_mib"] for n, rs in results.items()}
    print(f"{'run':<36}{'samples/s':>11}{'CPU s/step':>12}{'states/rank':>15}")
    for name in runs:
        states = f"{held[name]:>11.1f} MiB" if held[name] else ""
        print(f"{name:<36}{speed[name]:>11.2f}{cpu[name]:>12.2f}{states:>15}")
    half = args.layers // 2
    same_split = f"runyard, stage 1 from block {half}"
    torch_run = "torch pipelining, direct"
    print(
        f"pipeline, runyard / torch on the same split (block {half}): "
        f"{speed[same_split] / speed[torch_run]:.2f}x samples/s, "
        f"{cpu[same_split] / cpu[torch_run]:.2f}x CPU per step (goal >= 0.95x samples/s)"
    )
    chosen = ", ".join(results["runyard, auto"][-1]["points"])
    manual = [name for name in runs if name.startswith("runyard, stage 1")]
    best = max(manual, key=lambda name: speed[name])
    print(
        f"auto (optimize={args.optimize}, stage 1 from {chosen}) / "
        f"{'best manual' if args.sweep else 'the middle split'} "
        f"({best.removeprefix('runyard, ')}): {speed['runyard, auto'] / speed[best]:.2f}x"
    )
    ratio = held[f"sharded over {SHARD_DEGREE}"] / held["replicas (ddp)"]
    print(
        f"sharded over {SHARD_DEGREE} / replicas, model states per rank: {ratio:.3f} "
        f"(goal <= {1.1 / SHARD_DEGREE:.3f}, 1.1/d)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runner", default="runyard", help=argparse.SUPPRESS)
    parser.add_argument("--cut", default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--family", default="gpt2", help=argparse.SUPPRESS)
    parser.add_argument("--families", default="gpt2,llama", help="gpt2, llama or both")
    parser.add_argument("--microbatches", type=int, default=4, help="microbatches per step")
    parser.add_argument(
        "--optimize",
        default="speed",
        choices=["speed", "memory"],
        help="what the auto partition balances (SageMaker's default is memory)",
    )
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every run")
    parser.add_argument("--sweep", action="store_true", help="also every manual split")
    parser.add_argument("--layers", type=int, default=6, help="blocks")
    parser.add_argument("--width", type=int, default=256, help="hidden width")
    parser.add_argument("--sequence", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--vocabulary", type=int, default=8192, help="vocabulary size")
    parser.add_argument("--batch", type=int, default=16, help="sequences per step (global)")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print(machine())
    for family in args.families.split(","):
        _family(args, family)


if __name__ == "__main__":
    main()
