"""Where automatic partitioning cuts a stack of uneven blocks, against every manual split."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from contract.modelparallel import Parameters
from runtime.modelparallel.pipeline import ModelCall
from runtime.modelparallel.splits import (
    PartitionError,
    allowed_starts,
    balanced_cuts,
    measure,
    split_points,
)


class Uneven(nn.Module):
    """Blocks whose parameter bytes and compute differ several times over."""

    def __init__(self, widths: list[int]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 64)) for width in widths
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


WIDTHS = [2048, 64, 64, 1024, 64, 64, 2048, 64]


def _stage_costs(values: list[float], firsts: list[int]) -> list[float]:
    bounds = [*firsts, len(values)]
    return [sum(values[bounds[i] : bounds[i + 1]]) for i in range(len(firsts))]


def _best_manual(values: list[float], stages: int) -> float:
    best = float("inf")
    for cuts in itertools.combinations(range(1, len(values)), stages - 1):
        best = min(best, max(_stage_costs(values, [0, *cuts])))
    return best


def _cut(memory_weight: float, stages: int) -> list[int]:
    model = Uneven(WIDTHS)
    example = ModelCall((torch.randn(256, 64),), {})
    points = split_points(
        model,
        Parameters(partitions=stages, memory_weight=memory_weight),
        stages,
        example,
        {},
        print,
    )
    return [0, *(int(point.split(".")[1]) for point in points)]


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_balanced_cuts_are_the_best_contiguous_split(stages: int) -> None:
    costs = [float(width) for width in WIDTHS]
    firsts = balanced_cuts(costs, stages)
    assert len(firsts) == stages
    assert max(_stage_costs(costs, firsts)) == _best_manual(costs, stages)


def test_by_memory_the_split_is_the_best_manual_one() -> None:
    # memory_weight 1: parameter bytes and the bytes each block passes on, nothing else.
    model = Uneven(WIDTHS)
    measured = measure(model, list(model.blocks), ModelCall((torch.randn(256, 64),), {}))
    assert measured.activation_bytes == [256 * 64 * 4] * len(WIDTHS)
    memory = [
        float(p + a)
        for p, a in zip(measured.parameter_bytes, measured.activation_bytes, strict=True)
    ]
    firsts = _cut(memory_weight=1.0, stages=3)
    assert max(_stage_costs(memory, firsts)) == _best_manual(memory, 3)


def test_by_measured_time_the_split_is_the_best_manual_one() -> None:
    model = Uneven(WIDTHS)
    measured = measure(model, list(model.blocks), ModelCall((torch.randn(256, 64),), {}))
    # The wide blocks take longest: what the cost model is fed is what was measured.
    assert measured.seconds[0] > measured.seconds[1]
    firsts = balanced_cuts(measured.costs(memory_weight=0.0), 3)
    assert max(_stage_costs(measured.seconds, firsts)) == pytest.approx(
        _best_manual(measured.seconds, 3)
    )


def test_without_tracing_the_model_is_not_run() -> None:
    class Untraceable(Uneven):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise AssertionError("skip_tracing runs no forward")

    parameters = Parameters(partitions=2, skip_tracing=True, memory_weight=0.0)
    example = ModelCall((torch.randn(4, 64),), {})
    # By parameter bytes alone (which go with the blocks' widths): 2048 + 64 + 64 + 1024
    # against 64 + 64 + 2048 + 64 is the most even cut.
    points = split_points(Untraceable(WIDTHS), parameters, 2, example, {}, print)
    assert points == ["blocks.4"]


class Tied(nn.Module):
    """An embedding, blocks, a head; ``share`` names modules that use one weight."""

    def __init__(self, share: tuple[str, str] | None) -> None:
        super().__init__()
        self.embed = nn.Linear(64, 64)
        self.blocks = nn.ModuleList(nn.Linear(64, 64) for _ in range(4))
        self.head = nn.Linear(64, 64)
        if share is not None:
            first, second = (self.get_submodule(name) for name in share)
            second.weight = first.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


@pytest.mark.parametrize(
    ("share", "allowed"),
    [
        (None, {1, 2, 3}),
        (("blocks.1", "blocks.3"), {1}),
        (("embed", "blocks.1"), {2, 3}),
        (("blocks.2", "head"), {1, 2}),
    ],
)
def test_modules_that_share_a_parameter_stay_on_one_stage(
    share: tuple[str, str] | None, allowed: set[int]
) -> None:
    model = Tied(share)
    assert allowed_starts(model, "blocks", list(model.blocks)) == allowed
    firsts = balanced_cuts([1.0] * 4, 2, allowed)
    assert firsts[1] in allowed


def test_a_weight_tied_before_and_after_the_stack_cannot_be_split() -> None:
    model = Tied(("embed", "head"))
    with pytest.raises(PartitionError, match="first and the last stage"):
        allowed_starts(model, "blocks", list(model.blocks))
    with pytest.raises(PartitionError, match="no way to cut"):
        balanced_cuts([1.0] * 4, 3, {1})


def test_a_model_with_fewer_blocks_than_stages_is_refused() -> None:
    example = ModelCall((torch.randn(4, 64),), {})
    with pytest.raises(PartitionError, match="fewer than the 4 pipeline stages"):
        split_points(Uneven([8, 8]), Parameters(partitions=4), 4, example, {}, print)


def test_manual_placement_follows_the_marks() -> None:
    model = Uneven([8, 8, 8, 8])
    placed = {id(model.blocks[2]): 1, id(model.blocks[3]): 1}
    example = ModelCall((torch.randn(4, 64),), {})
    parameters = Parameters(partitions=2, auto_partition=False)
    assert split_points(model, parameters, 2, example, placed, print) == ["blocks.2"]
    with pytest.raises(PartitionError, match="in order along the stack"):
        split_points(model, parameters, 2, example, {id(model.blocks[0]): 1}, print)


def _layers(count: int) -> list[nn.Module]:
    return [nn.Linear(64, 64) for _ in range(count)]


class Nested(nn.Module):
    """Blocks in an nn.Sequential inside an nn.Sequential with the embedding and head, each
    block itself a small nn.Sequential: only the stack of blocks balances the model."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(64, 64),
            nn.Sequential(*(nn.Sequential(*_layers(2)) for _ in range(4))),
            nn.Linear(64, 64),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@pytest.mark.parametrize(
    ("model", "points"),
    [
        # The model itself is the stack: its items are named by their index alone.
        (nn.Sequential(*_layers(4)), ["2"]),
        (Nested(), ["body.1.2"]),
        # Few blocks of many layers each: the blocks, not a block's layers.
        (Uneven([64, 64]), ["blocks.1"]),
    ],
)
def test_the_stack_is_the_container_that_balances_the_model(
    model: nn.Module, points: list[str]
) -> None:
    parameters = Parameters(partitions=2, skip_tracing=True, memory_weight=0.0)
    example = ModelCall((torch.randn(4, 64),), {})
    assert split_points(model, parameters, 2, example, {}, print) == points


def test_a_model_without_a_stack_is_refused_naming_the_containers() -> None:
    example = ModelCall((torch.randn(4, 64),), {})
    with pytest.raises(PartitionError, match=r"nn\.ModuleList or nn\.Sequential"):
        split_points(nn.Linear(64, 64), Parameters(partitions=2), 2, example, {}, print)
