"""Where a model's pipeline stages begin.

Stages begin at *units*: modules of the model, in the order its forward runs them, as fine
as the cost model needs. From the model's children down, a module that holds more than
1/(4 x stages) of the model's parameter bytes is replaced by its own children, of any kind
(``nn.Sequential`` and ``nn.ModuleList`` items, ``nn.ModuleDict`` values, plain
attributes), except a block: an item of an ``nn.ModuleList`` or ``nn.Sequential`` beside
another of its class (a transformer's block, or a ResNet's, is a unit whole). A unit
without parameters, or one the measured forward did not run exactly once, begins no stage:
it goes with the stage its call falls in.

With ``auto_partition`` the units are cut where the stages' costs are most even. A unit's
cost is ``memory_weight`` x its share of the memory (its parameter bytes and the bytes of
the activation it passes on) plus the rest x its share of the measured forward time: the
balance SageMaker's library documents. Where the job leaves ``memory_weight`` out,
``optimize`` sets it as SageMaker's does: 0.2 for ``speed`` (stages of even compute), 0.8
for ``memory`` (stages of even memory). With ``skip_tracing`` the model is not run to
measure it, nor when its parameters are not made yet (``delayed_parameter_initialization``):
units keep the order they were made in, and parameter bytes stand for both. Units that
share a parameter stay on one stage where the cuts allow (the closest sharers first); where
they cannot (tied input and output embeddings), each stage that uses it holds a copy
(``ties``). Without ``auto_partition``, each unit goes where ``smp.partition`` /
``set_partition`` put it or its closest placed ancestor (else to ``default_partition``),
and never to a stage before an earlier unit's. The chosen partition is printed in the
job's logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from contract.modelparallel import Parameters
from libraries.modelparallel.calls import ModelCall
from libraries.modelparallel.stage_outputs import without_cache

# Containers whose items of one class are blocks: each a unit whole.
STACKS = (nn.ModuleList, nn.Sequential)
# A unit holds at most 1/(GRANULARITY x stages) of the model's parameter bytes, unless it
# is a block of a stack or has no children: enough choice for even stages.
GRANULARITY = 4


class PartitionError(ValueError):
    pass


@dataclass(frozen=True)
class Unit:
    name: str
    module: nn.Module


def split_points(
    module: nn.Module,
    parameters: Parameters,
    stages: int,
    example: ModelCall,
    placed: Mapping[int, int],
    say: Callable[[str], None],
) -> list[str]:
    """The names of the units that begin stages 1.. (stage 0 begins the model)."""
    found = units(module, stages)
    if parameters.auto_partition:
        unmade = any(parameter.is_meta for parameter in module.parameters())
        if unmade and not parameters.skip_tracing:
            say("auto_partition: parameters are not made yet, so units are weighed by size")
        measured = (
            Measured.of_sizes(found)
            if parameters.skip_tracing or unmade
            else measure(module, found, example)
        )
        _enough_starts(measured, stages)
        costs = measured.costs(parameters.balance_memory_weight)
        starts = kept_together(module, measured, stages)
        firsts = balanced_cuts(costs, stages, starts)
    else:
        measured = Measured.of_sizes(found)
        firsts = _manual_cuts(module, measured, parameters.default_partition, placed, stages)
    _log(say, firsts, measured)
    return [measured.units[index].name for index in firsts[1:]]


def units(module: nn.Module, stages: int) -> list[Unit]:
    """The model's units, in the order they were registered (which a measured forward
    reorders as it runs them)."""
    share = _bytes(module) / (GRANULARITY * stages)

    def split(name: str, parent: nn.Module) -> Iterator[Unit]:
        children = list(parent.named_children())
        kinds = [type(child) for _, child in children]
        for child_name, child in children:
            full = f"{name}.{child_name}" if name else child_name
            block = isinstance(parent, STACKS) and kinds.count(type(child)) > 1
            if _bytes(child) > share and not block and any(True for _ in child.children()):
                yield from split(full, child)
            else:
                yield Unit(full, child)

    found = list(split("", module))
    if not found:
        raise PartitionError("a model in pipeline stages needs submodules to cut between")
    return found


@dataclass(frozen=True)
class Measured:
    """Each unit, in the order the model runs them: its parameter bytes, the bytes of its
    output, its forward seconds, and which units stages 1.. may begin at."""

    units: list[Unit]
    parameter_bytes: list[int]
    activation_bytes: list[int]
    seconds: list[float]
    starts: frozenset[int]
    # False: the model was not run, and parameter bytes stand for compute too.
    timed: bool = True

    @classmethod
    def of_sizes(cls, found: Sequence[Unit]) -> Measured:
        sizes = [_bytes(unit.module) for unit in found]
        starts = frozenset(index for index, size in enumerate(sizes) if size and index)
        zeros = [0] * len(found)
        return cls(list(found), sizes, zeros, [float(s) for s in sizes], starts, timed=False)

    def costs(self, memory_weight: float) -> list[float]:
        memory = [p + a for p, a in zip(self.parameter_bytes, self.activation_bytes, strict=True)]
        return [
            memory_weight * held / max(sum(memory), 1)
            + (1 - memory_weight) * took / max(sum(self.seconds), 1e-12)
            for held, took in zip(memory, self.seconds, strict=True)
        ]


def measure(module: nn.Module, found: list[Unit], example: ModelCall) -> Measured:
    """Each unit's forward time on the first microbatch (the second of two runs), the
    bytes of what it passes on, and the order the model runs the units in. The model's
    own code between units (a causal mask built before the blocks, a loss computed after
    the head) counts to the unit that runs next, or to the last one after it: it runs on
    that unit's stage."""
    count = len(found)
    took, passed, calls = [0.0] * count, [0] * count, [0] * count
    order: list[int] = []
    # When the model or the last unit to run ended: what the next unit's time counts from.
    mark = [0.0]
    last = [-1]

    def before(index: int) -> None:
        calls[index] += 1
        if index not in order:
            order.append(index)
        now = time.perf_counter()
        took[index] += now - mark[0]
        mark[0], last[0] = now, index

    def after(index: int, output: Any) -> None:
        now = time.perf_counter()
        took[index] += now - mark[0]
        mark[0] = now
        passed[index] = sum(
            t.numel() * t.element_size()
            for t in torch.utils._pytree.tree_leaves(output)
            if isinstance(t, torch.Tensor)
        )

    def model_began(*_: Any) -> None:
        mark[0], last[0] = time.perf_counter(), -1

    def model_ended(*_: Any) -> None:
        if last[0] >= 0:
            took[last[0]] += time.perf_counter() - mark[0]

    handles = [
        module.register_forward_pre_hook(model_began),
        module.register_forward_hook(model_ended),
    ]
    for index, unit in enumerate(found):
        handles.append(unit.module.register_forward_pre_hook(lambda *_, i=index: before(i)))
        handles.append(
            unit.module.register_forward_hook(lambda _m, _a, out, i=index: after(i, out))
        )
    try:
        with torch.no_grad():
            for run in range(2):
                if run == 1:  # the second run is the one timed: the first warms up
                    took[:], calls[:] = [0.0] * count, [0] * count
                # Called as the stages will call it: no key/value cache (``stage_outputs``).
                args, kwargs = without_cache(module.forward, example.args, example.kwargs)
                module(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    # Units the forward never ran (unused modules) go last; none begins a stage.
    ranked = order + [index for index in range(count) if index not in order]
    sizes = [_bytes(unit.module) for unit in found]
    return Measured(
        [found[i] for i in ranked],
        [sizes[i] for i in ranked],
        [passed[i] for i in ranked],
        [took[i] for i in ranked],
        frozenset(at for at, i in enumerate(ranked) if at and sizes[i] and calls[i] == 1),
    )


def kept_together(module: nn.Module, measured: Measured, stages: int) -> frozenset[int]:
    """The units a stage may begin at, less those that would part units sharing a
    parameter: the closest sharers first, for as long as enough units are left to begin
    the stages at."""
    unit_of = {
        id(inner): index
        for index, unit in enumerate(measured.units)
        for inner in unit.module.modules()
    }
    holders: dict[int, set[int]] = {}
    for owner in module.modules():
        if id(owner) in unit_of:
            for parameter in owner.parameters(recurse=False):
                holders.setdefault(id(parameter), set()).add(unit_of[id(owner)])
    spans = sorted((max(held) - min(held), min(held), max(held)) for held in holders.values())
    allowed = set(measured.starts)
    for _, first, last in spans:
        narrowed = allowed - set(range(first + 1, last + 1))
        if len(narrowed) >= stages - 1:
            allowed = narrowed
    return frozenset(allowed)


def balanced_cuts(
    costs: Sequence[float], stages: int, allowed: AbstractSet[int] | None = None
) -> list[int]:
    """The first unit of each of ``stages`` contiguous groups of ``costs``, making the
    costliest group as cheap as it can be (an exact search). Groups begin only at
    ``allowed`` units (any, when None)."""
    count = len(costs)
    starts = set(range(count)) if allowed is None else set(allowed) | {0}
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    # best[k][i]: the least possible costliest group when units i.. make k groups.
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
        raise PartitionError(f"the model's modules leave no way to cut it into {stages} stages")
    firsts, start = [], 0
    for groups in range(stages, 0, -1):
        firsts.append(start)
        start = cut[groups][start]
    return firsts


def _enough_starts(measured: Measured, stages: int) -> None:
    if len(measured.starts) + 1 < stages:
        names = ", ".join(unit.name for unit in measured.units)
        raise PartitionError(
            f"the model has {len(measured.starts) + 1} modules a stage could begin at "
            f"({names}), fewer than the {stages} pipeline stages (partitions)"
        )


def _bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def _manual_cuts(
    module: nn.Module,
    measured: Measured,
    default: int,
    placed: Mapping[int, int],
    stages: int,
) -> list[int]:
    """Each unit on the stage placed for it or its closest placed ancestor, and never on
    one before an earlier unit's: a pipeline runs its stages in order."""
    ancestors = _ancestors(module)
    where, latest = [], 0
    for unit in measured.units:
        stage = next(
            (placed[id(m)] for m in [unit.module, *ancestors[id(unit.module)]] if id(m) in placed),
            default,
        )
        latest = max(latest, stage)
        where.append(latest)
    if set(where) != set(range(stages)):
        raise PartitionError(
            f"modules are placed on stages {sorted(set(where))}: each of the {stages} "
            "stages needs modules (smp.partition / set_partition / default_partition)"
        )
    firsts = [where.index(stage) for stage in range(stages)]
    for index in firsts[1:]:
        if index not in measured.starts:
            raise PartitionError(
                f"stage {where[index]} would begin at {measured.units[index].name}, "
                "which holds no parameters: place a module with parameters there"
            )
    return firsts


def _ancestors(module: nn.Module) -> dict[int, list[nn.Module]]:
    """Each module's ancestors, closest first."""
    found: dict[int, list[nn.Module]] = {id(module): []}
    for _, parent in module.named_modules():
        for child in parent.children():
            found.setdefault(id(child), [parent, *found.get(id(parent), [])])
    return found


def _log(say: Callable[[str], None], firsts: list[int], measured: Measured) -> None:
    bounds = [*firsts, len(measured.seconds)]
    for stage in range(len(firsts)):
        members = range(bounds[stage], bounds[stage + 1])
        detail = ", ".join(
            f"{measured.units[i].name} ({measured.parameter_bytes[i] / 2**20:.2f} MiB parameters"
            + (
                f", {measured.activation_bytes[i] / 2**20:.2f} MiB out, "
                f"{measured.seconds[i] * 1e3:.2f} ms)"
                if measured.timed
                else ")"
            )
            for i in members
        )
        say(f"stage {stage}: {detail}")
