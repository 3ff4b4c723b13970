"""A classifier on synthetic data, written as Horovod's PyTorch guide writes scripts:
``hvd.init()``, a DistributedSampler over ``hvd.size()`` shards, the learning rate scaled
by the number of processes, ``hvd.DistributedOptimizer``, the initial parameters and
optimizer state broadcast from rank 0, metrics averaged with ``hvd.allreduce``, and the
model saved by rank 0 only.

Runyard runs it unchanged with ``distribution={"mpi": {"enabled": True,
"processes_per_host": 2}}``: the launcher makes ``horovod.torch`` importable in the job's
processes (Runyard's, on torch.distributed, where the environment has no Horovod of its
own).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import horovod.torch as hvd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.02, help="for one process")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    return parser.parse_args()


def dataset(args: argparse.Namespace) -> TensorDataset:
    # The same data on every process, from one seed: the sampler picks each one's shard.
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(args.samples, args.features, generator=generator)
    weights = torch.randn(args.features, args.classes, generator=generator)
    return TensorDataset(inputs, (inputs @ weights).argmax(dim=1))


def metric_average(value: float, name: str) -> float:
    return float(hvd.allreduce(torch.tensor(value), name=name))


def main() -> None:
    args = parse_args()
    hvd.init()
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # Several processes share an instance's cores.
    torch.set_num_threads(1)
    print(
        f"rank {hvd.rank()}/{hvd.size()}, local rank {hvd.local_rank()}/{hvd.local_size()}, "
        f"instance {hvd.cross_rank()}/{hvd.cross_size()}",
        flush=True,
    )

    data = dataset(args)
    sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank())
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)

    model = nn.Sequential(nn.Linear(args.features, 64), nn.ReLU(), nn.Linear(64, args.classes)).to(
        device
    )
    # Synchronous training over hvd.size() processes: the global batch is that many times
    # larger, and so is the learning rate.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=compression,
        op=hvd.Average,
    )

    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        total, correct, seen = 0.0, 0, 0
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = loss_fn(outputs, labels)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(labels)
            correct += int((outputs.argmax(dim=1) == labels).sum())
            seen += len(labels)
        loss_avg = metric_average(total / seen, "avg_loss")
        accuracy = metric_average(correct / seen, "avg_accuracy")
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {loss_avg:.4f}, accuracy {accuracy:.3f}", flush=True)

    # Checkpoints and the model from rank 0 only, so that ranks do not overwrite each other.
    if hvd.rank() == 0:
        model_dir = Path(args.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), model_dir / "model.pt")
        metrics = {"loss": loss_avg, "accuracy": accuracy, "size": hvd.size()}
        (model_dir / "metrics.json").write_text(json.dumps(metrics))
        print(f"accuracy {accuracy:.3f}, model saved to {model_dir}", flush=True)


if __name__ == "__main__":
    main()
