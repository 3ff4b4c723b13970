"""The training both sides of the correctness tests run: a small regression model whose
parameter sizes do not divide evenly by 2 or 4 processes (so the shards need padding), a
fixed global batch per step, SGD with momentum."""

from __future__ import annotations

import torch
from torch import nn

STEPS = 6
SAMPLES_PER_RANK = 8
FEATURES = 13
# Small fusion buffers (bytes) so that one step fills several of them.
BUCKET_CAP_MB = 1000 / 2**20


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(FEATURES, 31), nn.Tanh(), nn.Linear(31, 7), nn.Tanh(), nn.Linear(7, 3)
    )


def global_batch(step: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + step)
    samples = SAMPLES_PER_RANK * world_size
    inputs = torch.randn(samples, FEATURES, generator=generator)
    targets = torch.randn(samples, 3, generator=generator)
    return inputs, targets


def rank_batch(step: int, world_size: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = global_batch(step, world_size)
    part = slice(rank * SAMPLES_PER_RANK, (rank + 1) * SAMPLES_PER_RANK)
    return inputs[part], targets[part]


def train(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Trains in place; returns the final parameters as one flat tensor."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for inputs, targets in batches:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    return flat_parameters(model)


def flat_parameters(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def single_process_reference(world_size: int) -> torch.Tensor:
    """The same steps on one process, each on the whole global batch."""
    return train(make_model(), [global_batch(step, world_size) for step in range(STEPS)])
