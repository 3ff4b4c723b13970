"""A small classifier trained on synthetic data with Runyard's parameter servers.

Written as a SageMaker script would be: hyperparameters arrive as arguments and the model
goes to SM_MODEL_DIR. Submit it with ``distribution={"parameter_server": {"enabled":
True}}`` and two or more instances: the launcher starts one parameter server per instance
and this script as the worker(s), with the RUNYARD_PS_* variables set.

Each worker trains on its own shard of the data; the servers hold the parameters and run
the optimizer. Worker 0 pulls the final parameters and saves them. Every worker exits
with status 1 if the model misses ``--target-loss``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path

import torch
from torch import nn

import libraries.parameter_server as ps


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--mode", choices=["async", "sync"], default="async")
    parser.add_argument("--max-staleness", type=int, default=None)
    parser.add_argument("--target-loss", type=float, default=0.15)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    return parser.parse_args()


def synthetic_dataset(
    samples: int, features: int, classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    # Every worker draws the same data from the same seed, then keeps its own shard.
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(samples, features, generator=generator)
    weights = torch.randn(features, classes, generator=generator)
    labels = (inputs @ weights).argmax(dim=1)
    return inputs, labels


def full_loss(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(inputs), labels))


def main() -> int:
    args = parse_args()
    ps.init()
    index, workers = ps.worker_index(), ps.num_workers()
    print(f"worker {index}/{workers} on {os.environ.get('RUNYARD_HOST', 'localhost')}")

    inputs, labels = synthetic_dataset(args.samples, args.features, args.classes)
    my_inputs, my_labels = inputs[index::workers], labels[index::workers]
    model = nn.Sequential(nn.Linear(args.features, 64), nn.ReLU(), nn.Linear(64, args.classes))
    trainer = ps.Trainer(
        model,
        functools.partial(torch.optim.SGD, lr=args.lr, momentum=args.momentum),
        mode=args.mode,
        max_staleness=args.max_staleness,
    )

    for epoch in range(args.epochs):
        order = torch.randperm(len(my_inputs), generator=torch.Generator().manual_seed(epoch))
        total, seen = 0.0, 0
        for start in range(0, len(order), args.batch_size):
            batch = order[start : start + args.batch_size]
            loss = nn.functional.cross_entropy(model(my_inputs[batch]), my_labels[batch])
            loss.backward()
            trainer.step()
            total += loss.item() * len(batch)
            seen += len(batch)
        print(f"epoch {epoch + 1}/{args.epochs} worker {index} loss {total / seen:.4f}")

    trainer.pull()
    final = full_loss(model, inputs, labels)
    print(f"worker {index} final loss {final:.4f} (target {args.target_loss})")
    if index == 0:
        model_dir = Path(args.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), model_dir / "model.pt")
        (model_dir / "metrics.json").write_text(json.dumps({"loss": final, "workers": workers}))
        print(f"saved model to {model_dir / 'model.pt'}")
    ps.shutdown()
    if final > args.target_loss:
        print(f"final loss {final:.4f} missed the target {args.target_loss}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
