"""Tensor parallelism inside pipeline stages (``tensor_parallel_degree`` > 1 with
``partitions`` > 1).

torch's ``pipeline()`` cuts a model into stages by tracing it with ``torch.export``, which
cannot trace DTensor's module hooks (``tensor``). So in a pipelined job the marked blocks
are split as Megatron-LM splits them, in plain tensors the trace can follow, before the
script builds its optimizer: each projection of a block's plan is replaced, at its own
path and under its own parameter names, by the rank's share of it (``ColumnShare``: its
share of the outputs; ``RowShare``: its share of the inputs), and two operators of
Runyard's own, registered with ``torch.library`` so that the trace keeps them, carry the
communication: ``copy_to_group`` before a column share (an identity forward, an
all-reduce of the gradient backward) and ``sum_over_group`` after a row share (an
all-reduce forward, an identity backward). Each split block joins its group's rows on
entry and keeps this rank's own on exit (``batches``), with operators the trace keeps too.
The trace then sees one rank's shapes (its heads, its share of the MLP, its group's
rows in the blocks), and the stages compute what the whole model does.

A split parameter is a plain tensor, this rank's share. What is saved is the model's:
``Shares`` gives the whole value (``whole``) for a full state_dict, and a DTensor over
the tensor-parallel mesh (``as_dtensor``) for torch.distributed.checkpoint, so a
checkpoint rebuilds the whole model as the other layouts' checkpoints do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from torch.nn import functional

from libraries.modelparallel import batches, projections, tensor


@torch.library.custom_op("runyard_mp::sum_over_group", mutates_args=())
def sum_over_group(value: torch.Tensor, group: str) -> torch.Tensor:
    """The sum of ``value`` over the group's ranks."""
    summed = value.clone(memory_format=torch.contiguous_format)
    dist.all_reduce(summed, group=batches.GROUPS[group])
    return summed


@sum_over_group.register_fake
def _sum_shape(value: torch.Tensor, group: str) -> torch.Tensor:
    return torch.empty_like(value)


def _sum_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    # Every rank's output is the same sum: each passes its gradient on unchanged.
    return grad, None


sum_over_group.register_autograd(_sum_backward)


@torch.library.custom_op("runyard_mp::copy_to_group", mutates_args=())
def copy_to_group(value: torch.Tensor, group: str) -> torch.Tensor:
    """``value``, whose gradient is summed over the group's ranks: each rank's share of
    a projection contributes its part of the input's gradient."""
    return value.clone()


@copy_to_group.register_fake
def _copy_shape(value: torch.Tensor, group: str) -> torch.Tensor:
    return torch.empty_like(value)


def _copy_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.group = inputs[1]


def _copy_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    return sum_over_group(grad, ctx.group), None


copy_to_group.register_autograd(_copy_backward, setup_context=_copy_context)


@dataclass(frozen=True)
class Split:
    """How one parameter is shared: along ``axis``, of ``parts`` parts side by side."""

    axis: int
    parts: int
    shape: torch.Size  # the whole parameter's


class ColumnShare(nn.Module):
    """A rank's share of a projection's outputs (of every part, for a fused one)."""

    def __init__(self, whole: nn.Module, group: str, rank: int, degree: int, parts: int) -> None:
        super().__init__()
        self.transposed = projections.is_transposed(whole)
        self.group = group
        weight, bias = _parameters(whole)
        axis = 1 if self.transposed else 0
        self.splits = {"weight": Split(axis, parts, weight.shape)}
        self.weight = _share(weight, axis, parts, rank, degree)
        self.bias: nn.Parameter | None = None
        if bias is not None:
            self.splits["bias"] = Split(0, parts, bias.shape)
            self.bias = _share(bias, 0, parts, rank, degree)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        value = copy_to_group(value, self.group)
        return _project(value, self.weight, self.bias, self.transposed)


class RowShare(nn.Module):
    """A rank's share of a projection's inputs; the ranks' outputs summed, then the bias."""

    def __init__(self, whole: nn.Module, group: str, rank: int, degree: int) -> None:
        super().__init__()
        self.transposed = projections.is_transposed(whole)
        self.group = group
        weight, bias = _parameters(whole)
        axis = 0 if self.transposed else 1
        self.splits = {"weight": Split(axis, 1, weight.shape)}
        self.weight = _share(weight, axis, 1, rank, degree)
        self.bias: nn.Parameter | None = None
        if bias is not None:
            self.bias = nn.Parameter(bias.detach().clone(), requires_grad=bias.requires_grad)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        summed: torch.Tensor = sum_over_group(
            _project(value, self.weight, None, self.transposed), self.group
        )
        return summed + self.bias if self.bias is not None else summed


def _parameters(projection: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    weight = projection.weight
    bias = getattr(projection, "bias", None)
    assert isinstance(weight, torch.Tensor)
    return weight, bias if isinstance(bias, torch.Tensor) else None


def _project(
    value: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, transposed: bool
) -> torch.Tensor:
    if not transposed:
        return functional.linear(value, weight, bias)
    projected = value @ weight
    return projected + bias if bias is not None else projected


def _share(whole: torch.Tensor, axis: int, parts: int, rank: int, degree: int) -> nn.Parameter:
    if whole.is_meta:
        raise tensor.TensorParallelError(
            "delayed_parameter_initialization: Runyard does not make parameters late for "
            "tensor parallelism inside pipeline stages; make the model whole"
        )
    ordered = projections.by_rank(whole.detach(), axis, parts, degree)
    own = ordered.chunk(degree, dim=axis)[rank].clone()
    return nn.Parameter(own, requires_grad=whole.requires_grad)


class Shares:
    """The model's split parameters, by name, and how each is split over the group."""

    def __init__(self, group: dist.ProcessGroup, mesh: DeviceMesh) -> None:
        self.group = group
        self.mesh = mesh
        self.degree = dist.get_world_size(group)
        self.splits: dict[str, Split] = {}

    def whole(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """The whole parameter from this rank's share ``value`` (every rank of the group
        calls this together), in the model's order."""
        split = self.splits[name]
        if tuple(value.shape) == tuple(split.shape):
            return value
        parts = [torch.empty_like(value) for _ in range(self.degree)]
        dist.all_gather(parts, value.contiguous(), group=self.group)
        ordered = torch.cat(parts, dim=split.axis)
        return projections.in_model_order(ordered, split.axis, split.parts, self.degree)

    def own(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """This rank's share of ``value``: the whole parameter (a DTensor or plain), or
        already this rank's share."""
        split = self.splits[name]
        if isinstance(value, DTensor):
            value = value.full_tensor()
        if tuple(value.shape) != tuple(split.shape):
            return value
        ordered = projections.by_rank(value, split.axis, split.parts, self.degree)
        return ordered.chunk(self.degree, dim=split.axis)[self.mesh.get_local_rank()]

    def as_dtensor(self, name: str, value: torch.Tensor) -> DTensor:
        """This rank's share ``value`` of split parameter ``name`` (or of an optimizer
        moment of it) as a DTensor of the whole, in the model's order: what
        torch.distributed.checkpoint writes, each rank its own part."""
        whole = self.whole(name, value.detach())
        placements = [Shard(self.splits[name].axis)]
        return distribute_tensor(whole, self.mesh, placements, src_data_rank=None)


def distribute(
    model: nn.Module,
    marked: Mapping[int, bool],
    group: dist.ProcessGroup,
    mesh: DeviceMesh,
    *,
    join: bool = True,
) -> tuple[list[tuple[str, str]], Shares]:
    """Replaces the marked blocks' projections by this rank's shares; returns each split
    block's name ("" for the model itself) and family, and the shares' bookkeeping. With
    ``join`` each block computes on the rows of every rank's batch (``batches``)."""
    degree = dist.get_world_size(group)
    rank = dist.get_rank(group)
    key = batches.key_of(group)
    shares = Shares(group, mesh)
    blocks = tensor.planned(model, marked, degree)
    for name, block, plan in blocks:
        for path in (*plan.columns, *plan.rows):
            whole = block.get_submodule(path)
            share: ColumnShare | RowShare = (
                ColumnShare(whole, key, rank, degree, plan.parts.get(path, 1))
                if path in plan.columns
                else RowShare(whole, key, rank, degree)
            )
            owner_path, _, attribute = path.rpartition(".")
            setattr(block.get_submodule(owner_path) if owner_path else block, attribute, share)
            prefix = f"{name}.{path}." if name else f"{path}."
            shares.splits |= {prefix + each: split for each, split in share.splits.items()}
        plan.narrow(block, degree)
        if join:
            batches.join_batches(block, key)
    return [(name, plan.family) for name, _, plan in blocks], shares
