"""Making every process start alike: Python objects, a model's parameters and an
optimizer's state, sent from one rank to all the others."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from libraries.horovod import process_sets, state

T = TypeVar("T")

Parameters = (
    Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]] | Iterable[torch.Tensor]
)


def broadcast_object(
    obj: T | None, root_rank: int = 0, name: str | None = None, process_set: object = None
) -> T:
    """``root_rank``'s ``obj`` (pickled), on every process."""
    process_sets.check(process_set)
    if not state.distributed():
        return obj  # type: ignore[return-value]
    box = [obj]
    dist.broadcast_object_list(box, src=root_rank)
    return box[0]  # type: ignore[return-value]


def allgather_object(obj: T, name: str | None = None, process_set: object = None) -> list[T]:
    """Every process's ``obj``, in rank order."""
    process_sets.check(process_set)
    if not state.distributed():
        return [obj]
    found: list[Any] = [None] * state.size()
    dist.all_gather_object(found, obj)
    return found


def broadcast_parameters(params: Parameters, root_rank: int, process_set: object = None) -> None:
    """Gives every tensor of ``params`` (``model.state_dict()``, ``model.named_parameters()``
    or a list of tensors) ``root_rank``'s values, in place. Tensors of one dtype and device
    travel together in one broadcast."""
    process_sets.check(process_set)
    tensors = _tensors(params)
    if not state.distributed():
        return
    by_kind: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in tensors:
        by_kind.setdefault((tensor.dtype, tensor.device), []).append(tensor.detach())
    for group in by_kind.values():
        flat = torch.cat([tensor.reshape(-1) for tensor in group])
        dist.broadcast(flat, src=root_rank)
        if state.rank() != root_rank:
            offset = 0
            for tensor in group:
                tensor.copy_(flat[offset : offset + tensor.numel()].view_as(tensor))
                offset += tensor.numel()


def broadcast_optimizer_state(
    optimizer: torch.optim.Optimizer, root_rank: int, process_set: object = None
) -> None:
    """Gives every process ``root_rank``'s optimizer state and hyperparameters (learning
    rates, momenta, ...): the whole ``state_dict()``, including the state of parameters
    that have not stepped yet on the others."""
    process_sets.check(process_set)
    if not state.distributed():
        return
    sent = _on_cpu(optimizer.state_dict()) if state.rank() == root_rank else None
    received = broadcast_object(sent, root_rank)
    if state.rank() != root_rank:
        optimizer.load_state_dict(received)


def _tensors(params: Parameters) -> list[torch.Tensor]:
    items: Iterable[Any] = params.items() if isinstance(params, Mapping) else params
    found = []
    for item in items:
        key, value = item if isinstance(item, tuple) else (None, item)
        if not isinstance(value, torch.Tensor):
            where = f" {key!r}" if key is not None else ""
            raise ValueError(
                f"hvd.broadcast_parameters: entry{where} is a {type(value).__name__}, not a "
                "tensor (hvd.broadcast_object sends any object)"
            )
        found.append(value)
    return found


def _on_cpu(value: Any) -> Any:
    """A state dict with its tensors copied to the CPU, for pickling to other processes
    (``load_state_dict`` moves them to each parameter's device)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: _on_cpu(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_on_cpu(item) for item in value]
    return value
