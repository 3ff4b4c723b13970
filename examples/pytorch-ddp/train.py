"""A small classifier trained with torch.distributed DDP.

Written as a SageMaker PyTorch script would be: hyperparameters arrive as arguments,
paths come from SM_* variables, the launcher sets the rendezvous variables, and the model
is saved to SM_MODEL_DIR by rank 0. It trains on the CSV files of its ``train`` channel
(``make_data.py`` writes some) or, without one, on data it makes up the same way.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    return parser.parse_args()


def synthetic_dataset(
    samples: int, features: int, classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    # Every rank draws the same data from the same seed, then keeps its own shard.
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(samples, features, generator=generator)
    weights = torch.randn(features, classes, generator=generator)
    noise = 0.1 * torch.randn(samples, classes, generator=generator)
    labels = (inputs @ weights + noise).argmax(dim=1)
    return inputs, labels


def channel_dataset(channel: Path) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Rows of features and a label, from the channel's CSV files."""
    rows = [row for path in sorted(channel.glob("*.csv")) for row in csv.reader(path.open())]
    if not rows:
        return None
    table = torch.tensor([[float(value) for value in row] for row in rows])
    return table[:, :-1], table[:, -1].long()


def load_dataset(args: argparse.Namespace, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    channel = os.environ.get("SM_CHANNEL_TRAIN")
    found = channel_dataset(Path(channel)) if channel else None
    if rank == 0:
        print(f"training on {'the train channel' if found else 'made-up data'}")
    return found or synthetic_dataset(args.samples, args.features, args.classes)


def train(args: argparse.Namespace, rank: int, world: int) -> None:
    inputs, labels = load_dataset(args, rank)
    features, classes = inputs.shape[1], int(labels.max()) + 1
    inputs, labels = inputs[rank::world], labels[rank::world]
    torch.manual_seed(0)  # identical initial weights on every rank
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(features, 128), nn.ReLU(), nn.Linear(128, classes))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    started = time.monotonic()
    for epoch in range(args.epochs):
        order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(epoch))
        total = torch.zeros(2)
        for start in range(0, len(order), args.batch_size):
            batch = order[start : start + args.batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(inputs[batch]), labels[batch])
            loss.backward()
            optimizer.step()
            total += torch.tensor([loss.item() * len(batch), len(batch)])
        dist.all_reduce(total)
        print(f"epoch {epoch + 1}/{args.epochs} rank {rank} loss {total[0] / total[1]:.4f}")

    with torch.no_grad():
        correct = torch.tensor([(model(inputs).argmax(dim=1) == labels).sum().item(), len(labels)])
    dist.all_reduce(correct)
    accuracy = (correct[0] / correct[1]).item()
    print(f"rank {rank} done in {time.monotonic() - started:.1f} s, accuracy {accuracy:.3f}")

    if rank == 0:
        model_dir = Path(args.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), model_dir / "model.pt")
        (model_dir / "metrics.json").write_text(
            json.dumps({"accuracy": accuracy, "world_size": world})
        )
        print(f"saved model to {model_dir / 'model.pt'}")


def main() -> None:
    args = parse_args()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    host = os.environ.get("SM_CURRENT_HOST", "localhost")
    local_rank = os.environ.get("LOCAL_RANK")
    print(f"rank {rank}/{world} on {host} (local rank {local_rank}, backend {backend})")
    # Training happens in its own function so that the DDP model, and the collective
    # state it holds, is gone before the group is torn down; left for interpreter exit,
    # gloo can abort the process while it finalizes.
    train(args, rank, world)
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
