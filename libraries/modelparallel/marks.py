"""What a script says of its modules before wrapping the model: which stage a module goes
to (``smp.partition``, ``smp.set_partition``), which modules keep no activations
(``smp.set_activation_checkpointing``) and which are split across the tensor-parallel
group (``smp.tensor_parallelism``, ``smp.set_tensor_parallelism``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn
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


def set_activation_checkpointing(module: nn.Module, **_sagemaker_options: Any) -> None:
    """``module`` recomputes its activations in the backward pass instead of keeping them."""
    state = smp_state.current()
    if state.model is not None:
        raise RuntimeError("call smp.set_activation_checkpointing before smp.DistributedModel")
    state.checkpointed.append(module)


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
