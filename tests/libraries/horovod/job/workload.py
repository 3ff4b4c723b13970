"""What the Horovod check job trains, shared with the test that computes the same training
in one process: a small model, its batches, and the reference run."""

from __future__ import annotations

import torch
from torch import nn

FEATURES, HIDDEN, CLASSES = 8, 16, 3
PROCESSES = 4
GLOBAL_BATCH = 8 * PROCESSES
STEPS = 6
LR = 0.1
# Rank 0's initial parameters; every other rank starts elsewhere (ROOT_SEED + rank) until
# hvd.broadcast_parameters.
ROOT_SEED = 100
# How each variant of the job trains: DistributedOptimizer's arguments by name.
VARIANTS = ("average", "fp16", "sum", "predivide", "two_passes")


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, CLASSES))


def make_optimizer(model: nn.Module, lr: float = LR) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + step)
    inputs = torch.randn(GLOBAL_BATCH, FEATURES, generator=generator)
    labels = torch.randint(0, CLASSES, (GLOBAL_BATCH,), generator=generator)
    return inputs, labels


def shard(tensor: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    per = tensor.shape[0] // size
    return tensor[rank * per : (rank + 1) * per]


def reference() -> dict[str, torch.Tensor]:
    """One process, the whole global batch at each step: what every variant must reach."""
    model = make_model(ROOT_SEED)
    optimizer = make_optimizer(model)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(STEPS):
        inputs, labels = global_batch(step)
        optimizer.zero_grad()
        loss_fn(model(inputs), labels).backward()
        optimizer.step()
    return {key: value.detach().clone() for key, value in model.state_dict().items()}
