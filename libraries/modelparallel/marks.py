"""What a script says of its modules before wrapping the model: which stage a module goes
to (``smp.partition``, ``smp.set_partition``), which modules keep no activations
(``smp.set_activation_checkpointing``) and which are split across the tensor-parallel
group (``smp.tensor_parallelism``, ``smp.set_tensor_parallelism``)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn
from torch.distributed._composable.checkpoint_activation import (
    checkpoint as checkpoint_activations,
)
from torch.nn.modules.module import register_module_module_registration_hook

from libraries.modelparallel import state as smp_state


def set_partition(module: nn.Module, index: int) -> None:
    smp_state.current().partitions[id(module)] = index


# The stages of the ``partition`` blocks open now, innermost last.
_open_partitions: list[int] = []


@contextlib.contextmanager
def partition(index: int) -> Iterator[None]:
    """Modules assigned to a parent inside go to stage ``index`` (an inner block's wins)."""
    partitions = smp_state.current().partitions
    with _marking(_open_partitions, index, partitions.__setitem__):
        yield


@contextlib.contextmanager
def _marking(opened: list[Any], value: Any, mark: Callable[[int, Any], object]) -> Iterator[None]:
    """While open, each module assigned to a parent is marked (by id) with the innermost
    open block's value: one registration hook, held by the outermost block."""

    def marked(_parent: nn.Module, _name: str, child: nn.Module | None) -> None:
        if child is not None and opened:
            mark(id(child), opened[-1])

    outermost = not opened
    handle = register_module_module_registration_hook(marked) if outermost else None
    opened.append(value)
    try:
        yield
    finally:
        opened.pop()
        if handle is not None:
            handle.remove()


def set_activation_checkpointing(
    module: nn.Module,
    preserve_rng_state: bool = True,
    pack_args_as_tuple: bool = False,
    strategy: str = "each",
) -> None:
    """``module`` recomputes its activations in the backward pass instead of keeping them;
    a stack (``nn.Sequential``, ``nn.ModuleList``) each of its layers.

    SageMaker's ``strategy`` groups a stack's layers into fewer checkpoints
    (``contiguous``, ``group_<n>``); Runyard checkpoints each layer on its own under every
    strategy: the same gradients, with a little more memory kept (each layer's inputs
    rather than each group's). The random state is always kept for the recomputation, and
    tuples need no packing here, so ``preserve_rng_state`` and ``pack_args_as_tuple`` change
    nothing.

    It may come after ``smp.DistributedModel``, as SageMaker's may (its model is
    partitioned at the first step), until the first step has split the model into
    stages; with sharded states, before the model is wrapped."""
    state = smp_state.current()
    layers = _checkpointed_layers(module, strategy)
    model = state.model
    if model is not None and (model.pipeline is not None or state.mesh is not None):
        when = "the first step" if model.pipeline is not None else "smp.DistributedModel"
        raise RuntimeError(f"call smp.set_activation_checkpointing before {when}")
    if strategy != "each":
        state.say_once(
            f"activation checkpointing strategy {strategy!r}: each layer is checkpointed on its own"
        )
    state.checkpointed.extend(layers)
    if model is not None and state.topology.pp_size == 1:
        # Wrapped already and never split: the hooks go on the script's modules now (a
        # pipeline applies the marks to its stages' copies when it is built).
        for layer in layers:
            checkpoint_activations(layer)


_GROUP = re.compile(r"group_[1-9][0-9]*")


def _checkpointed_layers(module: nn.Module, strategy: str) -> list[nn.Module]:
    if strategy not in ("each", "contiguous") and not _GROUP.fullmatch(strategy):
        raise ValueError(
            f"smp.set_activation_checkpointing: strategy must be each, contiguous or "
            f"group_<n>, not {strategy!r}"
        )
    if isinstance(module, nn.Sequential | nn.ModuleList):
        return list(module)
    if strategy != "each":
        raise ValueError(
            f"smp.set_activation_checkpointing: strategy applies to a stack of layers "
            f"(nn.Sequential, nn.ModuleList), not to {type(module).__name__}"
        )
    return [module]


def set_tensor_parallelism(module: nn.Module, enabled: bool = True, **_options: Any) -> None:
    """``module`` and what it holds are split across the tensor-parallel group (where
    ``libraries.modelparallel.tensor`` knows how), or kept whole with ``enabled=False``."""
    state = smp_state.current()
    if state.model is not None:
        raise RuntimeError("call smp.set_tensor_parallelism before smp.DistributedModel")
    state.tensor_parallel[id(module)] = enabled


# Whether modules made now are split (the innermost ``tensor_parallelism`` block's say).
_open_tensor_parallelism: list[bool] = []


@contextlib.contextmanager
def tensor_parallelism(enabled: bool = True, **_options: Any) -> Iterator[None]:
    """Modules made inside are split across the tensor-parallel group (where
    ``libraries.modelparallel.tensor`` knows how), or kept whole with ``enabled=False``."""
    marked = smp_state.current().tensor_parallel
    with _marking(_open_tensor_parallelism, enabled, marked.setdefault):
        yield
