"""How tensor parallelism splits one projection of a block, an ``nn.Linear`` or the
``Conv1D`` of GPT-2 and its kin (transformers' ``pytorch_utils.Conv1D``: a linear layer
whose weight is stored transposed, ``(in, out)``), through torch's own
``ColwiseParallel``/``RowwiseParallel`` with the weight's matching axis split.

A projection may compute several parts side by side (GPT-2's ``c_attn``: query, key and
value, each ``n_embd`` wide). Split by plain columns, a rank would hold the whole query
and half the keys; each rank must rather hold its share of every part (its heads'
queries, keys and values). The parameter is kept in that order while split (rank 0's
share of each part, then rank 1's, ...), and a state_dict hook puts it back into the
model's own order whenever it is read or loaded, so saved weights, checkpoints and a full
``state_dict`` are the model's, whatever the degree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import (
    DTensor,
    Placement,
    Replicate,
    Shard,
    distribute_module,
    distribute_tensor,
)
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel


def is_projection(module: nn.Module | None) -> bool:
    return isinstance(module, nn.Linear) or is_transposed(module)


def is_transposed(module: nn.Module | None) -> bool:
    """A ``Conv1D``: ``nx`` inputs, ``nf`` outputs, its weight ``(nx, nf)``."""
    weight = getattr(module, "weight", None)
    nx, nf = getattr(module, "nx", None), getattr(module, "nf", None)
    return (
        isinstance(module, nn.Module)
        and isinstance(weight, torch.Tensor)
        and isinstance(nx, int)
        and isinstance(nf, int)
        and tuple(weight.shape) == (nx, nf)
    )


def features(module: nn.Module) -> tuple[int, int]:
    """(inputs, outputs) of a projection."""
    if is_transposed(module):
        return int(module.nx), int(module.nf)  # type: ignore[arg-type]
    assert isinstance(module, nn.Linear)
    return module.in_features, module.out_features


def columns(module: nn.Module, parts: int = 1) -> ParallelStyle:
    """The style that splits ``module``'s outputs (of ``parts`` parts side by side)."""
    return _Columns(parts, axis=1 if is_transposed(module) else 0)


def rows(module: nn.Module) -> ParallelStyle:
    """The style that splits ``module``'s inputs; the ranks' outputs are summed."""
    return _TransposedRows() if is_transposed(module) else RowwiseParallel()


class _Columns(ColwiseParallel):
    """torch's column split, for an ``nn.Linear`` (outputs: the weight's axis 0) or a
    ``Conv1D`` (axis 1), its outputs of ``parts`` parts held by rank."""

    def __init__(self, parts: int, axis: int) -> None:
        super().__init__()
        self.parts, self.axis = parts, axis

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        def partition(_name: str, owner: nn.Module, mesh: DeviceMesh) -> None:
            if owner is module:
                _split_parts(module, mesh, self.parts, {"weight": self.axis, "bias": 0})

        return _distributed(self, module, device_mesh, partition)


class _TransposedRows(RowwiseParallel):
    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        self.desired_input_layouts = (Shard(-1),)  # as torch's style sets it for a linear

        def partition(_name: str, owner: nn.Module, mesh: DeviceMesh) -> None:
            if owner is module:
                _register(module, "weight", mesh, [Shard(0)])
                if getattr(module, "bias", None) is not None:
                    _register(module, "bias", mesh, [Replicate()])

        return _distributed(self, module, device_mesh, partition)


def _distributed(
    style: ColwiseParallel | RowwiseParallel,
    module: nn.Module,
    mesh: DeviceMesh,
    partition: Callable[[str, nn.Module, DeviceMesh], None],
) -> nn.Module:
    """``module`` split by ``partition``, its input and output laid out as torch's own
    style lays out a linear layer's."""
    layouts = (style.input_layouts, style.desired_input_layouts)
    return distribute_module(
        module,
        mesh,
        partition,
        lambda mod, inputs, mesh: style._prepare_input_fn(  # type: ignore[no-untyped-call]
            *layouts, mod, inputs, mesh
        ),
        lambda mod, outputs, mesh: style._prepare_output_fn(  # type: ignore[no-untyped-call]
            style.output_layouts, style.use_local_output, mod, outputs, mesh
        ),
    )


def _register(module: nn.Module, name: str, mesh: DeviceMesh, placements: list[Placement]) -> None:
    parameter = getattr(module, name)
    split = distribute_tensor(parameter.detach(), mesh, placements)
    module.register_parameter(name, nn.Parameter(split, requires_grad=parameter.requires_grad))


@dataclass(frozen=True)
class Parts:
    """How a split parameter of several parts is held: along ``axis``, ``parts`` parts side
    by side, each cut in ``degree`` shares, held share-major (``by_rank``)."""

    axis: int
    parts: int
    degree: int

    def in_model_order(self, value: DTensor) -> DTensor:
        """``value`` (the parameter, or an optimizer moment of it, as held) in the model's
        order, laid out as it was. Every rank of the group gathers the whole."""
        with torch.no_grad():
            whole = in_model_order(value.full_tensor(), self.axis, self.parts, self.degree)
            return _share_of(whole, value)

    def as_held(self, value: torch.Tensor, like: DTensor) -> DTensor:
        """``value`` (in the model's order, whole or split) as the split holds it, laid out
        as ``like``."""
        whole = value.full_tensor() if isinstance(value, DTensor) else value
        with torch.no_grad():
            return _share_of(by_rank(whole, self.axis, self.parts, self.degree), like)


# The attribute of a split module that holds its parameters' ``Parts``, by name.
PARTS = "_parts_held_by_rank"


def parted(model: nn.Module) -> dict[str, Parts]:
    """Every parameter of ``model`` held by rank, by its name in the model."""
    found = {}
    for prefix, module in model.named_modules():
        for name, parts in getattr(module, PARTS, {}).items():
            found[f"{prefix}.{name}" if prefix else name] = parts
    return found


def _split_parts(module: nn.Module, mesh: DeviceMesh, parts: int, axes: dict[str, int]) -> None:
    """Splits each of ``axes``' parameters along its axis, reordered by rank first when
    ``parts`` > 1; hooks keep the model's order in what ``state_dict`` reads and loads."""
    degree = mesh.size()
    present = {name: axis for name, axis in axes.items() if getattr(module, name, None) is not None}
    for name, axis in present.items():
        with torch.no_grad():
            parameter = getattr(module, name)
            parameter.data = by_rank(parameter.data, axis, parts, degree)
        _register(module, name, mesh, [Shard(axis)])
    if parts > 1:
        held = {name: Parts(axis, parts, degree) for name, axis in present.items()}
        setattr(module, PARTS, held)
        module.register_state_dict_post_hook(  # type: ignore[no-untyped-call]
            _ModelOrder(held)
        )
        module.register_load_state_dict_pre_hook(  # type: ignore[no-untyped-call]
            _SplitOrder(held)
        )


def by_rank(tensor: torch.Tensor, axis: int, parts: int, degree: int) -> torch.Tensor:
    """``tensor``'s ``parts`` parts along ``axis``, each cut in ``degree`` shares, reordered
    share-major: rank 0's share of every part, then rank 1's."""
    return _swapped(tensor, axis, parts, degree)


def in_model_order(tensor: torch.Tensor, axis: int, parts: int, degree: int) -> torch.Tensor:
    """``by_rank`` undone."""
    return _swapped(tensor, axis, degree, parts)


def _swapped(tensor: torch.Tensor, axis: int, outer: int, inner: int) -> torch.Tensor:
    """``tensor`` with ``axis`` seen as (outer, inner, rest) blocks, read as (inner,
    outer, rest)."""
    shape = list(tensor.shape)
    cut = [*shape[:axis], outer, inner, shape[axis] // (outer * inner), *shape[axis + 1 :]]
    return tensor.reshape(cut).transpose(axis, axis + 1).reshape(shape)


class _ModelOrder:
    """state_dict post-hook: the split parameters as the model orders them. Every rank of
    the group gathers the whole (a state_dict of a split model is read by all of them)."""

    def __init__(self, held: dict[str, Parts]) -> None:
        self.held = held

    def __call__(
        self, module: nn.Module, state_dict: dict[str, Any], prefix: str, _metadata: Any
    ) -> None:
        for name, parts in self.held.items():
            value = state_dict.get(prefix + name)
            if isinstance(value, DTensor):
                state_dict[prefix + name] = parts.in_model_order(value)


class _SplitOrder:
    """load_state_dict pre-hook: loaded values (the model's order, whole or split) put in
    the split's order."""

    def __init__(self, held: dict[str, Parts]) -> None:
        self.held = held

    def __call__(self, module: nn.Module, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
        for name, parts in self.held.items():
            value = state_dict.get(prefix + name)
            own = getattr(module, name)
            if isinstance(value, torch.Tensor) and isinstance(own, DTensor):
                state_dict[prefix + name] = parts.as_held(value, own)


def _share_of(whole: torch.Tensor, like: DTensor) -> DTensor:
    """This rank's share of ``whole`` (which every rank holds), laid out as ``like`` (split
    over the tensor-parallel ranks, and sharded too where the states are)."""
    return distribute_tensor(
        whole.to(like.device), like.device_mesh, like.placements, src_data_rank=None
    )
