"""A classifier on synthetic data, written as SageMaker's data-parallel announcement writes
PyTorch scripts: smdistributed imports, dist.init_process_group(), the library's
DistributedDataParallel, the model saved to SM_MODEL_DIR by rank 0.

Runyard runs it unchanged with ``distribution={"smdistributed": {"dataparallel":
{"enabled": True}}}``; the launcher puts the smdistributed compatibility package on the
job's PYTHONPATH. Without CUDA it trains on the CPU (the seed's torch.cuda.set_device call
is then a logged no-op).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import smdistributed.dataparallel.torch.parallel.distributed as dist
import torch
from smdistributed.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
from torch import nn


class Net(nn.Module):
    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(features, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, classes)
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layers(inputs)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    return parser.parse_args()


def synthetic_dataset(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    # Every rank draws the same data from the same seed, then keeps its own shard.
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(args.samples, args.features, generator=generator)
    weights = torch.randn(args.features, args.classes, generator=generator)
    labels = (inputs @ weights).argmax(dim=1)
    return inputs, labels


def train(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    inputs, labels = synthetic_dataset(args)
    inputs, labels = inputs[rank::world].to(device), labels[rank::world].to(device)
    batch_size = max(args.batch_size // world, 1)  # the global batch is split over ranks

    torch.manual_seed(0)
    model = DDP(Net(args.features, args.classes).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(epoch))
        total = torch.zeros(2, device=device)
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size].to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(inputs[batch]), labels[batch])
            loss.backward()
            optimizer.step()
            total += torch.stack(
                [loss.detach() * len(batch), torch.tensor(float(len(batch)), device=device)]
            )
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {(total[0] / total[1]).item():.4f}")

    model.eval()
    with torch.no_grad():
        correct = (model(inputs).argmax(dim=1) == labels).sum()
    counts = torch.stack([correct.float(), torch.tensor(float(len(labels)), device=device)])
    dist.all_reduce(counts)
    accuracy = (counts[0] / counts[1]).item()
    if rank == 0:
        model_dir = Path(args.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), model_dir / "model.pt")
        (model_dir / "metrics.json").write_text(
            json.dumps({"accuracy": accuracy, "world_size": world})
        )
        print(f"accuracy {accuracy:.3f}, model saved to {model_dir / 'model.pt'}")


def main() -> None:
    args = parse_args()
    dist.init_process_group()
    # As the seed does: one GPU per process, chosen by the local rank.
    torch.cuda.set_device(dist.get_local_rank())
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(
        f"rank {dist.get_rank()}/{dist.get_world_size()}, local rank "
        f"{dist.get_local_rank()}/{dist.get_local_size()}, device {device}"
    )
    train(args, device)
    # The DDP model (and its reduction thread) is gone before the group is torn down.
    gc.collect()
    dist.barrier()


if __name__ == "__main__":
    main()
