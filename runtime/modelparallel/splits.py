"""Where a model's pipeline stages begin.

Stages begin at items of the model's stack of blocks (an ``nn.ModuleList``, as in
transformers, or an ``nn.Sequential``, the model itself included: ``_stack`` says which);
what comes before the stack goes with the first stage, what comes after with the last. With
``auto_partition`` the stack is cut where the stages' costs are most even. A block's cost is
``memory_weight`` x its share of the memory (its parameter bytes and the bytes of the
activation it passes on) plus the rest x its share of the measured forward time: the balance
SageMaker's library documents. Where the job leaves ``memory_weight`` out, ``optimize`` sets
it as SageMaker's does: 0.2 for ``speed`` (stages of even compute), 0.8 for ``memory``
(stages of even memory). With ``skip_tracing`` the model is not run to measure it, nor when
its parameters are not made yet (``delayed_parameter_initialization``), and parameter bytes
stand for both. Blocks that share a parameter stay on one stage, as do blocks that share one
with what comes before (the first stage) or after the stack (the last). Without
``auto_partition``, each block goes where ``smp.partition``/``set_partition`` put it (or to
``default_partition``). The chosen partition is printed in the job's logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from contract.modelparallel import Parameters

if TYPE_CHECKING:
    from runtime.modelparallel.pipeline import ModelCall


class PartitionError(ValueError):
    pass


def split_points(
    module: nn.Module,
    parameters: Parameters,
    stages: int,
    example: ModelCall,
    placed: Mapping[int, int],
    say: Callable[[str], None],
) -> list[str]:
    """The names of the blocks that begin stages 1.. (stage 0 begins the model)."""
    name, blocks = _stack(module)
    if len(blocks) < stages:
        raise PartitionError(
            f"the model's longest stack of blocks has {len(blocks)}, fewer than the "
            f"{stages} pipeline stages (partitions)"
        )
    if parameters.auto_partition:
        unmade = any(parameter.is_meta for parameter in module.parameters())
        if unmade and not parameters.skip_tracing:
            say("auto_partition: parameters are not made yet, so blocks are weighed by size")
        measured = (
            Measured.of_sizes(blocks)
            if parameters.skip_tracing or unmade
            else measure(module, blocks, example)
        )
        allowed = allowed_starts(module, name, blocks)
        weight = parameters.balance_memory_weight
        firsts = balanced_cuts(measured.costs(weight), stages, allowed)
    else:
        measured = Measured.of_sizes(blocks)
        firsts = _manual_cuts(blocks, parameters.default_partition, placed, stages)
    _log(say, name, firsts, measured)
    return [item_name(name, index) for index in firsts[1:]]


@dataclass(frozen=True)
class Measured:
    """Each block's parameter bytes, the bytes of its output, and its forward seconds."""

    parameter_bytes: list[int]
    activation_bytes: list[int]
    seconds: list[float]
    # False: the model was not run, and parameter bytes stand for compute too.
    timed: bool = True

    @classmethod
    def of_sizes(cls, blocks: Sequence[nn.Module]) -> Measured:
        sizes = [_bytes(block) for block in blocks]
        return cls(sizes, [0] * len(blocks), [float(size) for size in sizes], timed=False)

    def costs(self, memory_weight: float) -> list[float]:
        memory = [p + a for p, a in zip(self.parameter_bytes, self.activation_bytes, strict=True)]
        return [
            memory_weight * held / max(sum(memory), 1)
            + (1 - memory_weight) * took / max(sum(self.seconds), 1e-12)
            for held, took in zip(memory, self.seconds, strict=True)
        ]


def balanced_cuts(
    costs: Sequence[float], stages: int, allowed: AbstractSet[int] | None = None
) -> list[int]:
    """The first block of each of ``stages`` contiguous groups of ``costs``, making the
    costliest group as cheap as it can be (an exact search: stacks are short). Groups
    begin only at ``allowed`` blocks (any, when None)."""
    count = len(costs)
    starts = set(range(count)) if allowed is None else set(allowed) | {0}
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    # best[k][i]: the least possible costliest group when blocks i.. make k groups.
    best = [[float("inf")] * (count + 1) for _ in range(stages + 1)]
    cut = [[count] * (count + 1) for _ in range(stages + 1)]
    best[0][count] = 0.0
    for groups in range(1, stages + 1):
        for start in range(count - groups, -1, -1):
            if start not in starts:
                continue
            for end in range(start + 1, count - groups + 2):
                if end < count and end not in starts:
                    continue
                worst = max(prefix[end] - prefix[start], best[groups - 1][end])
                if worst < best[groups][start]:
                    best[groups][start], cut[groups][start] = worst, end
    if best[stages][0] == float("inf"):
        raise PartitionError(
            f"blocks that share parameters leave no way to cut the stack into {stages} stages"
        )
    firsts, start = [], 0
    for groups in range(stages, 0, -1):
        firsts.append(start)
        start = cut[groups][start]
    return firsts


def allowed_starts(module: nn.Module, stack: str, blocks: Sequence[nn.Module]) -> set[int]:
    """The blocks a stage may begin at: not one whose stage would part it from a block,
    or from the modules around the stack, that it shares a parameter with."""
    # Each parameter's holders: block i, or -1 before the stack and N after it (in the
    # order the modules were registered, which is the order models run them in).
    where: dict[int, set[int]] = {}
    count, seen_stack = len(blocks), False
    for name, parameter in module.named_parameters(remove_duplicate=False):
        prefix = item_name(stack, "")
        if name.startswith(prefix):
            seen_stack = True
            position = int(name[len(prefix) :].split(".")[0])
        else:
            position = count if seen_stack else -1
        where.setdefault(id(parameter), set()).add(position)
    allowed = set(range(1, len(blocks)))
    for holders in where.values():
        if len(holders) > 1:
            if -1 in holders and len(blocks) in holders:
                raise PartitionError(
                    "a parameter is shared by modules before and after the stack of blocks "
                    "(tied input and output embeddings, say), which would put it on the "
                    "first and the last stage"
                )
            first = max(min(holders), 0)
            last = min(max(holders), len(blocks) - 1)
            allowed -= set(range(first + 1, last + 1))
    return allowed


def item_name(stack: str, index: int | str) -> str:
    """The name of a stack's item (``h.3``; ``3`` where the model itself is the stack)."""
    return f"{stack}.{index}" if stack else str(index)


def _stack(module: nn.Module) -> tuple[str, list[nn.Module]]:
    """The model's stack of blocks: of its ``nn.ModuleList``s and ``nn.Sequential``s (the
    model itself, too) of two items or more, the one whose items the most parameter bytes
    can be balanced over: its items' bytes less its largest item's. The stack of a
    transformer's blocks beats a block's own small sequence, and beats a sequence that
    holds the embedding, the stack and the head as three items. Among stacks as good, the
    longest."""
    stacks = [
        (name, list(child))
        for name, child in module.named_modules()
        if isinstance(child, nn.ModuleList | nn.Sequential) and len(child) >= 2
    ]
    if not stacks:
        raise PartitionError(
            "pipeline stages begin at items of an nn.ModuleList or nn.Sequential, and the "
            "model has none of two items or more"
        )

    def balance(stack: tuple[str, list[nn.Module]]) -> tuple[int, int]:
        sizes = [_bytes(item) for item in stack[1]]
        return sum(sizes) - max(sizes), len(sizes)

    return max(stacks, key=balance)


def _bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def measure(module: nn.Module, blocks: list[nn.Module], example: ModelCall) -> Measured:
    """Each block's forward time on the first microbatch (the second of two runs), and the
    bytes of what it passes on."""
    took = [0.0] * len(blocks)
    passed = [0] * len(blocks)
    started: dict[int, float] = {}

    def before(index: int) -> None:
        started[index] = time.perf_counter()

    def after(index: int, output: Any) -> None:
        took[index] = time.perf_counter() - started[index]
        passed[index] = sum(
            t.numel() * t.element_size()
            for t in torch.utils._pytree.tree_leaves(output)
            if isinstance(t, torch.Tensor)
        )

    handles = []
    for index, block in enumerate(blocks):
        handles.append(block.register_forward_pre_hook(lambda *_, i=index: before(i)))
        handles.append(block.register_forward_hook(lambda _m, _a, out, i=index: after(i, out)))
    try:
        with torch.no_grad():
            for _ in range(2):
                module(*example.args, **example.kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return Measured([_bytes(block) for block in blocks], passed, took)


def _manual_cuts(
    blocks: list[nn.Module], default: int, placed: Mapping[int, int], stages: int
) -> list[int]:
    where = [placed.get(id(block), default) for block in blocks]
    if where != sorted(where) or set(where) != set(range(stages)):
        raise PartitionError(
            f"blocks are placed on stages {where}: each of the {stages} stages needs "
            "blocks, in order along the stack (smp.partition / set_partition)"
        )
    return [where.index(stage) for stage in range(stages)]


def _log(say: Callable[[str], None], name: str, firsts: list[int], measured: Measured) -> None:
    bounds = [*firsts, len(measured.seconds)]
    for stage in range(len(firsts)):
        members = range(bounds[stage], bounds[stage + 1])
        detail = ", ".join(
            f"{item_name(name, i)} ({measured.parameter_bytes[i] / 2**20:.2f} MiB parameters"
            + (
                f", {measured.activation_bytes[i] / 2**20:.2f} MiB out, "
                f"{measured.seconds[i] * 1e3:.2f} ms)"
                if measured.timed
                else ")"
            )
            for i in members
        )
        say(f"stage {stage}: {detail}")
