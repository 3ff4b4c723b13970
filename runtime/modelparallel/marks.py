"""What a script says of its modules before wrapping the model: which stage a module goes
to (``smp.partition``, ``smp.set_partition``) and which modules keep no activations
(``smp.set_activation_checkpointing``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import nn
from torch.nn.modules.module import register_module_module_registration_hook

from runtime.modelparallel import state as smp_state


def set_partition(module: nn.Module, index: int) -> None:
    smp_state.current().partitions[id(module)] = index


# The stages of the ``partition`` blocks open now, innermost last.
_open_partitions: list[int] = []


@contextlib.contextmanager
def partition(index: int) -> Iterator[None]:
    """Modules assigned to a parent inside go to stage ``index`` (an inner block's wins)."""
    state = smp_state.current()

    def place(_parent: nn.Module, _name: str, child: nn.Module | None) -> None:
        if child is not None and _open_partitions:
            state.partitions[id(child)] = _open_partitions[-1]

    outermost = not _open_partitions
    handle = register_module_module_registration_hook(place) if outermost else None
    _open_partitions.append(index)
    try:
        yield
    finally:
        _open_partitions.pop()
        if handle is not None:
            handle.remove()


def set_activation_checkpointing(module: nn.Module, **_sagemaker_options: Any) -> None:
    """``module`` recomputes its activations in the backward pass instead of keeping them."""
    state = smp_state.current()
    if state.model is not None:
        raise RuntimeError("call smp.set_activation_checkpointing before smp.DistributedModel")
    state.checkpointed.append(module)
