"""What ``optimize``, ``activation_loading_horizon`` and delayed parameter initialisation
do, each on its own: the partition each ``optimize`` picks, the loading-back schedule of
offloaded activations (driven with CPU tensors, as the CUDA path runs it but for the copy
stream), and a delayed model's values."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from contract.modelparallel import Parameters, problems
from libraries.modelparallel.activations import Offloader
from libraries.modelparallel.calls import ModelCall
from libraries.modelparallel.delayed import allocate, delay_param_initialization, initialise
from libraries.modelparallel.splits import split_points


class Fat(nn.Module):
    """Many parameter bytes, next to no compute."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Linear(64, 4096)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table.bias[:64]


class Busy(nn.Module):
    """Few parameter bytes, much compute."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(20):
            x = torch.tanh(self.linear(x))
        return x


class BusyThenFat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Busy(), Fat(), Fat()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _points(**given: object) -> list[str]:
    example = ModelCall((torch.randn(256, 64),), {})
    parameters = Parameters(partitions=2, **given)  # type: ignore[arg-type]
    return split_points(BusyThenFat(), parameters, 2, example, {}, print)


def test_optimize_speed_balances_compute_and_memory_balances_memory() -> None:
    # Nearly all the compute is in the busy block, nearly all the memory in the two fat
    # ones: even compute gives the busy block a stage of its own, even memory one fat
    # block to each stage.
    assert _points(optimize="speed") == ["blocks.1"]
    assert _points(optimize="memory") == ["blocks.2"]
    assert _points() == ["blocks.2"]  # SageMaker's default, memory
    # A memory_weight the job gives wins over optimize's.
    assert _points(optimize="memory", memory_weight=0.0) == ["blocks.1"]
    assert Parameters(optimize="speed").balance_memory_weight == 0.2
    assert Parameters(optimize="memory").balance_memory_weight == 0.8


@pytest.mark.parametrize(
    ("value", "why"),
    [(0, "at least 1"), (-2, "at least 1"), (2.5, "whole number"), (True, "whole number")],
)
def test_activation_loading_horizon_is_a_whole_number_from_one(value: object, why: str) -> None:
    found = problems({"activation_loading_horizon": value}, 1, ("parameters",))
    assert [problem.loc for problem in found] == [("parameters", "activation_loading_horizon")]
    assert why in found[0].message
    assert problems({"activation_loading_horizon": 1}, 1, ("parameters",)) == []


def _offloaded_backward(horizon: int) -> tuple[Offloader, list[torch.Tensor]]:
    torch.manual_seed(0)
    layers = nn.Sequential(*(nn.Linear(16, 16) for _ in range(6)))
    offloader = Offloader(torch.device("cpu"), horizon)
    # Two microbatches, both forwards before either backward, as a pipeline runs them.
    with offloader.hooks():
        losses = [torch.tanh(layers(torch.randn(4, 16))).sum() for _ in range(2)]
    for loss in reversed(losses):
        loss.backward()
    return offloader, [p.grad.clone() for p in layers.parameters() if p.grad is not None]


def test_offloaded_activations_load_back_at_most_horizon_ahead() -> None:
    torch.manual_seed(0)
    layers = nn.Sequential(*(nn.Linear(16, 16) for _ in range(6)))
    for loss in reversed([torch.tanh(layers(torch.randn(4, 16))).sum() for _ in range(2)]):
        loss.backward()
    want = [p.grad for p in layers.parameters()]
    late = {}
    for horizon in (1, 4):
        offloader, grads = _offloaded_backward(horizon)
        for got, expected in zip(grads, want, strict=True):
            assert torch.equal(got, expected)
        # At the busiest moment exactly ``horizon`` tensors waited on the device.
        assert offloader.most_ahead == horizon
        late[horizon] = offloader.late
    # Autograd takes a node's saved tensors back in its own order, not always the
    # reverse of saving: one tensor ahead misses some, four only the very first take.
    assert late[4] == 1
    assert late[1] > late[4]


class Buffered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.first = nn.Linear(8, 8)
        self.register_buffer("scale", torch.arange(8.0))
        self.second = nn.Linear(8, 3)


def test_a_delayed_model_is_made_as_one_process_makes_it() -> None:
    eager = Buffered()
    with delay_param_initialization():
        late = Buffered()
    assert all(parameter.is_meta for parameter in late.parameters())
    assert torch.equal(late.scale, eager.scale)  # buffers keep their values
    allocate(late, torch.device("cpu"))
    initialise(late, holds=lambda _: True)
    want = eager.state_dict()
    for name, got in late.state_dict().items():
        assert torch.equal(got, want[name]), name


def test_a_delayed_module_without_reset_parameters_is_refused() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gain = nn.Parameter(torch.ones(3))

    with delay_param_initialization():
        late = Scaled()
    allocate(late, torch.device("cpu"))
    with pytest.raises(RuntimeError, match="no reset_parameters"):
        initialise(late, holds=lambda _: True)
