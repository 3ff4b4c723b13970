"""Where automatic partitioning cuts a stack of uneven blocks, against every manual split."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from contract.modelparallel import Parameters
from libraries.modelparallel.calls import ModelCall
from libraries.modelparallel.splits import (
    Measured,
    PartitionError,
    balanced_cuts,
    kept_together,
    measure,
    split_points,
    units,
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
    measured = measure(model, units(model, 3), ModelCall((torch.randn(256, 64),), {}))
    assert measured.activation_bytes == [256 * 64 * 4] * len(WIDTHS)
    memory = [
        float(p + a)
        for p, a in zip(measured.parameter_bytes, measured.activation_bytes, strict=True)
    ]
    firsts = _cut(memory_weight=1.0, stages=3)
    assert max(_stage_costs(memory, firsts)) == _best_manual(memory, 3)


def test_by_measured_time_the_split_is_the_best_manual_one() -> None:
    model = Uneven(WIDTHS)
    example = ModelCall((torch.randn(256, 64),), {})
    runs = [measure(model, units(model, 3), example) for _ in range(5)]
    # The wide blocks take longest: what the cost model is fed is what was measured. Each
    # block's fastest of five runs, since a loaded machine may pause any one of them.
    fastest = [min(seconds) for seconds in zip(*(run.seconds for run in runs), strict=True)]
    assert fastest[0] > fastest[1]
    measured = runs[0]
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


def _kept_together(model: nn.Module, stages: int = 2) -> set[int]:
    return set(kept_together(model, Measured.of_sizes(units(model, stages)), stages))


@pytest.mark.parametrize(
    ("share", "allowed"),
    [
        # Units: embed (0), blocks.0-3 (1-4), head (5).
        (None, {1, 2, 3, 4, 5}),
        (("blocks.1", "blocks.3"), {1, 2, 5}),
        (("embed", "blocks.1"), {3, 4, 5}),
        (("blocks.2", "head"), {1, 2, 3}),
    ],
)
def test_modules_that_share_a_parameter_stay_on_one_stage(
    share: tuple[str, str] | None, allowed: set[int]
) -> None:
    model = Tied(share)
    assert _kept_together(model) == allowed
    firsts = balanced_cuts([1.0] * 6, 2, allowed)
    assert firsts[1] in allowed


def test_a_weight_tied_first_and_last_leaves_every_cut_open() -> None:
    # Tied input and output embeddings: the first and the last stage hold a copy each.
    model = Tied(("embed", "head"))
    assert _kept_together(model) == {1, 2, 3, 4, 5}
    with pytest.raises(PartitionError, match="no way to cut"):
        balanced_cuts([1.0] * 4, 3, {1})


def test_the_closest_sharers_stay_together_where_not_all_can() -> None:
    # blocks.1 and blocks.2 share a weight, and blocks.0 and the head another: 3 stages
    # cannot keep both pairs, so the closer pair is kept and the other parted.
    model = Tied(("blocks.1", "blocks.2"))
    model.head.weight = model.blocks[0].weight
    assert _kept_together(model, stages=3) == {1, 2, 4, 5}
    example = ModelCall((torch.randn(4, 64),), {})
    points = split_points(model, Parameters(partitions=3), 3, example, {}, print)
    assert "blocks.2" not in points


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
    # A module placed before its predecessors' stage runs on theirs: a pipeline runs in
    # order. Everything after blocks.0 follows it to stage 1, and stage 0 holds nothing.
    with pytest.raises(PartitionError, match=r"stages \[1\]: each of the 2 stages"):
        split_points(model, parameters, 2, example, {id(model.blocks[0]): 1}, print)
    assert split_points(model, parameters, 2, example, {id(model.blocks[1]): 1}, print) == [
        "blocks.1"
    ]


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


def test_a_model_without_submodules_is_refused() -> None:
    example = ModelCall((torch.randn(4, 64),), {})
    with pytest.raises(PartitionError, match="needs submodules"):
        split_points(nn.Linear(64, 64), Parameters(partitions=2), 2, example, {}, print)


class Residual(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.inner(x)


class Attributes(nn.Module):
    """A ResNet's shape: a stem, stages as plain attributes (each an nn.Sequential of
    blocks), heads in an nn.ModuleDict; the head is made before the stages it follows."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({"logits": nn.Linear(64, 8)})
        self.stem = nn.Linear(16, 64)
        self.layer1 = nn.Sequential(*(Residual(64) for _ in range(3)))
        self.layer2 = nn.Sequential(*(Residual(64) for _ in range(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads["logits"](self.layer2(self.layer1(self.stem(x))))


def test_any_module_tree_is_cut_between_blocks_in_the_order_it_runs() -> None:
    model = Attributes()
    found = [unit.name for unit in units(model, 2)]
    # Attributes are units like items; each stage of blocks is opened into its blocks,
    # which stay whole; the small ModuleDict of heads is one unit.
    assert found == [
        "heads",
        "stem",
        *(f"layer1.{i}" for i in range(3)),
        *(f"layer2.{i}" for i in range(3)),
    ]
    example = ModelCall((torch.randn(8, 16),), {})
    measured = measure(model, units(model, 2), example)
    assert measured.units[0].name == "stem"
    assert measured.units[-1].name == "heads"
    # By parameter bytes, six even blocks: three to a stage.
    parameters = Parameters(partitions=2, memory_weight=1.0)
    assert split_points(model, parameters, 2, example, {}, print) == ["layer2.0"]
    # Four stages: in the blocks' order, never before the stem.
    points = split_points(model, Parameters(partitions=4, memory_weight=1.0), 4, example, {}, print)
    assert len(points) == 3
    assert all(point.startswith(("layer1.", "layer2.")) for point in points)
    assert points == sorted(points)


def test_modules_without_parameters_or_not_run_once_begin_no_stage() -> None:
    class Reused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = nn.Linear(8, 8)
            self.act = nn.ReLU()
            self.twice = nn.Linear(8, 8)
            self.unused = nn.Linear(8, 8)
            self.last = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.last(self.twice(self.act(self.twice(self.first(x)))))

    model = Reused()
    measured = measure(model, units(model, 2), ModelCall((torch.randn(2, 8),), {}))
    names = [unit.name for unit in measured.units]
    assert names == ["first", "twice", "act", "last", "unused"]
    assert {names[i] for i in measured.starts} == {"last"}
