"""Tensor parallelism in Runyard's model-parallel library on a transformers Llama or GPT-2
(from its library's default configuration, sizes shrunk), 2 processes on the same global
batch, side by side in one run: tensor-parallel degree 2 (the decoder layers split over
both ranks, made inside ``smp.tensor_parallelism()``) against degree 1 (each rank the
whole model, 2 replicas under ``ddp``). Each rank is fed its own half of the batch.
Prints samples per second, CPU seconds per step (both processes together) and the
parameter bytes each rank holds (its gradients and Adam's moments are as large).

    .venv/bin/python bench/modelparallel_tensor.py [--family llama|gpt2] [--steps 6]
        [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import transformers
from dataparallel_common import launch, machine, report

from libraries import modelparallel as smp

PROCESSES = 2


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def made(args: argparse.Namespace) -> torch.nn.Module:
    """The family's causal language model as ``from_config`` builds it from the library's
    default configuration, with only its sizes shrunk (nothing downloaded): the cache,
    attention implementation and tied embeddings as the library ships them."""
    sizes = {"vocab_size": args.vocabulary}
    if args.family == "gpt2":
        # GPT-2's one special token is the vocabulary's last.
        config: transformers.PretrainedConfig = transformers.GPT2Config(
            n_layer=args.layers,
            n_embd=args.width,
            n_head=8,
            n_positions=args.sequence,
            bos_token_id=args.vocabulary - 1,
            eos_token_id=args.vocabulary - 1,
            **sizes,
        )
    else:
        default = transformers.LlamaConfig()
        # The MLP as wide against the model as the default's (11008 for 4096).
        ratio = default.intermediate_size / default.hidden_size
        config = transformers.LlamaConfig(
            num_hidden_layers=args.layers,
            hidden_size=args.width,
            intermediate_size=int(args.width * ratio),
            num_attention_heads=8,
            max_position_embeddings=args.sequence,
            **sizes,
        )
    return transformers.AutoModelForCausalLM.from_config(config)


def worker(args: argparse.Namespace) -> None:
    config: dict[str, object] = {"microbatches": 1, "ddp": True}
    if args.degree > 1:
        config["tensor_parallel_degree"] = args.degree
    smp.init(config)
    torch.manual_seed(0)
    split = smp.tensor_parallelism() if args.degree > 1 else contextlib.nullcontext()
    with split:
        model = made(args)
    wrapped = smp.DistributedModel(model)
    optimizer = smp.DistributedOptimizer(torch.optim.Adam(wrapped.parameters(), lr=1e-4))
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocabulary, (args.batch, args.sequence), generator=generator)
    share = args.batch // smp.dp_size()
    own = ids[smp.dp_rank() * share : (smp.dp_rank() + 1) * share]

    @smp.step
    def train_step(net: smp.DistributedModel, input_ids: torch.Tensor) -> torch.Tensor:
        loss = net(input_ids=input_ids, labels=input_ids)["loss"]
        net.backward(loss)
        return loss

    times, cpu = [], []
    for step in range(args.steps + 2):
        dist.barrier()
        start, used = time.perf_counter(), cpu_seconds()
        optimizer.zero_grad()
        train_step(wrapped, own)
        optimizer.step()
        dist.barrier()
        if step >= 2:  # the first steps warm up
            times.append(time.perf_counter() - start)
            cpu.append(cpu_seconds() - used)

    def local(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to_local() if hasattr(tensor, "to_local") else tensor

    held = sum(local(p).numel() * p.element_size() for p in wrapped.module.parameters())
    both: list[float] = [0.0] * PROCESSES
    dist.all_gather_object(both, statistics.median(cpu))
    if smp.rank() == 0:
        report(
            {
                "samples_per_s": args.batch / statistics.median(times),
                "cpu_s": sum(both),
                "parameter_bytes": held,
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--degree", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--family", choices=("llama", "gpt2"), default="llama")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every run")
    parser.add_argument("--layers", type=int, default=8, help="decoder layers")
    parser.add_argument("--width", type=int, default=512, help="hidden size")
    parser.add_argument("--sequence", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--vocabulary", type=int, default=2048, help="vocabulary size")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print(
        f"{machine()}; {args.family} of {args.layers} layers x {args.width}, vocabulary "
        f"{args.vocabulary}, {args.sequence} tokens; {PROCESSES} processes, batch {args.batch}"
    )
    passed = [
        f"--{key}={value}"
        for key, value in vars(args).items()
        if key in ("family", "steps", "layers", "width", "sequence", "vocabulary", "batch")
    ]
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for degree in results:
            results[degree].append(
                launch(Path(__file__), PROCESSES, [f"--degree={degree}", *passed])
            )
    print(f"{'tensor-parallel degree':<24}{'samples/s':>11}{'CPU s/step':>12}{'MiB/rank':>10}")
    median = {
        degree: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for degree, runs in results.items()
    }
    for degree, figures in median.items():
        print(
            f"{degree:<24}{figures['samples_per_s']:>11.2f}{figures['cpu_s']:>12.2f}"
            f"{figures['parameter_bytes'] / 2**20:>10.1f}"
        )
    print(
        f"degree 2 / 1: parameter bytes per rank "
        f"{median[2]['parameter_bytes'] / median[1]['parameter_bytes']:.2f}x, step time "
        f"{median[1]['samples_per_s'] / median[2]['samples_per_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
