"""Horovod's tensor collectives on torch.distributed's default group.

Every call spans the whole job and, as with any torch.distributed collective, every
process must make the same calls in the same order: Horovod matches tensors across
processes by ``name`` and may take them in any order, Runyard takes them in the order
they come (``name`` is accepted and not needed). ``allreduce``, ``allgather`` and
``broadcast`` are differentiable, as Horovod's are.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from libraries.horovod import ops, process_sets, state
from libraries.horovod.compression import Compression, Compressor
from libraries.horovod.handles import Handle
from libraries.horovod.ops import ReduceOp
from libraries.horovod.refusals import NotOfferedError


def allreduce_async_(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: object = None,
) -> Handle:
    """Reduces ``tensor`` over every process, in place, in the background."""
    process_sets.check(process_set)
    chosen = ops.resolve(op, average)
    if prescale_factor != 1.0:
        tensor.mul_(prescale_factor)
    works = []
    if state.distributed():
        work = dist.all_reduce(tensor, ops.torch_op(chosen), async_op=True)
        assert work is not None  # async_op=True always gives the work
        works.append(work)

    def finish() -> torch.Tensor:
        if chosen is ReduceOp.AVERAGE:
            _divide_(tensor, state.size())
        if postscale_factor != 1.0:
            tensor.mul_(postscale_factor)
        return tensor

    return Handle(works, finish)


def allreduce_async(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: object = None,
) -> Handle:
    """As ``allreduce_async_``, into a new tensor; ``tensor`` is left as it is."""
    return allreduce_async_(
        tensor.detach().clone(), average, name, op, prescale_factor, postscale_factor, process_set
    )


def allreduce_(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: object = None,
) -> torch.Tensor:
    return allreduce_async_(
        tensor, average, name, op, prescale_factor, postscale_factor, process_set
    ).wait()


def allreduce(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    compression: type[Compressor] | Compressor = Compression.none,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: object = None,
) -> torch.Tensor:
    """The reduction of ``tensor`` over every process (by default its average), as a new
    tensor, sent compressed as ``compression`` says."""
    process_sets.check(process_set)
    chosen = ops.resolve(op, average)
    if chosen not in (ReduceOp.AVERAGE, ReduceOp.SUM) and _needs_gradient(tensor):
        raise NotOfferedError(
            f"gradients through hvd.allreduce with op={chosen.name.title()}",
            "only Average and Sum are differentiable; reduce a detached tensor",
        )
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(  # type: ignore[no-untyped-call]  # unannotated in torch
        compressed, chosen, prescale_factor, postscale_factor
    )
    result: torch.Tensor = compression.decompress(reduced, ctx)
    return result


def grouped_allreduce_(tensors: list[torch.Tensor], **options: Any) -> list[torch.Tensor]:
    """Every tensor reduced in place, the reductions started together."""
    handles = [allreduce_async_(tensor, **options) for tensor in tensors]
    return [handle.wait() for handle in handles]


def grouped_allreduce(tensors: list[torch.Tensor], **options: Any) -> list[torch.Tensor]:
    handles = [allreduce_async(tensor, **options) for tensor in tensors]
    return [handle.wait() for handle in handles]


def allgather_async(
    tensor: torch.Tensor, name: str | None = None, process_set: object = None
) -> Handle:
    """Every process's ``tensor`` concatenated along the first dimension, in rank order;
    that dimension may differ between processes, the others may not."""
    process_sets.check(process_set)
    return _gather(tensor.detach())[0]


def allgather(
    tensor: torch.Tensor, name: str | None = None, process_set: object = None
) -> torch.Tensor:
    process_sets.check(process_set)
    gathered: torch.Tensor = _Allgather.apply(tensor)  # type: ignore[no-untyped-call]
    return gathered


def broadcast_async_(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: object = None
) -> Handle:
    """``tensor`` takes the value it has on ``root_rank``, in place, in the background."""
    process_sets.check(process_set)
    _check_root(root_rank)
    if not state.distributed():
        return Handle.done(tensor)
    work = dist.broadcast(tensor, src=root_rank, async_op=True)
    assert work is not None  # async_op=True always gives the work
    return Handle([work], lambda: tensor)


def broadcast_async(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: object = None
) -> Handle:
    return broadcast_async_(tensor.detach().clone(), root_rank, name, process_set)


def broadcast_(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: object = None
) -> torch.Tensor:
    return broadcast_async_(tensor, root_rank, name, process_set).wait()


def broadcast(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: object = None
) -> torch.Tensor:
    """``root_rank``'s ``tensor``, as a new tensor on every process."""
    process_sets.check(process_set)
    _check_root(root_rank)
    result: torch.Tensor = _Broadcast.apply(tensor, root_rank)  # type: ignore[no-untyped-call]
    return result


def barrier(process_set: object = None) -> None:
    """Returns once every process has called it."""
    process_sets.check(process_set)
    if state.distributed():
        dist.barrier()


def _divide_(tensor: torch.Tensor, count: int) -> None:
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        tensor.div_(count)
    else:
        # As Horovod scales integers: the fraction is cut off.
        tensor.copy_(torch.div(tensor, count, rounding_mode="trunc"))


def _needs_gradient(tensor: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and tensor.requires_grad


def _gather(tensor: torch.Tensor) -> tuple[Handle, list[int]]:
    """The all-gather started, and how many rows each process gives."""
    if tensor.dim() == 0:
        raise ValueError("hvd.allgather needs a tensor of at least one dimension")
    if not state.distributed():
        return Handle.done(tensor.clone()), [tensor.shape[0]]
    rows = _rows_of_every_rank(tensor)
    most = max(rows)
    padded = tensor.contiguous()
    if tensor.shape[0] < most:
        padded = tensor.new_zeros((most, *tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
    gathered = tensor.new_empty((most * len(rows), *tensor.shape[1:]))
    work = dist.all_gather_single(gathered, padded, async_op=True)
    assert work is not None  # async_op=True always gives the work

    def finish() -> torch.Tensor:
        if all(count == most for count in rows):
            return gathered
        return torch.cat([gathered[i * most : i * most + count] for i, count in enumerate(rows)])

    return Handle([work], finish), rows


def _rows_of_every_rank(tensor: torch.Tensor) -> list[int]:
    """A collective: every process's shape, checked to differ only in the first size."""
    shape = torch.tensor([tensor.dim(), *tensor.shape], dtype=torch.int64, device=tensor.device)
    shapes = [torch.empty_like(shape) for _ in range(state.size())]
    dist.all_gather(shapes, shape)
    found = [tuple(int(size) for size in other.tolist()) for other in shapes]
    mine = found[state.rank()]
    odd = [rank for rank, other in enumerate(found) if other[:1] + other[2:] != mine[:1] + mine[2:]]
    if odd:
        raise ValueError(
            "hvd.allgather: tensors may differ only in their first dimension; "
            f"ranks {odd} have shapes {[found[rank][1:] for rank in odd]}, this rank "
            f"{mine[1:]}"
        )
    return [other[1] for other in found]


def _check_root(root_rank: int) -> None:
    if not 0 <= root_rank < state.size():
        raise ValueError(f"root_rank={root_rank} is not a rank of this job of {state.size()}")


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, tensor: torch.Tensor, op: ReduceOp, prescale: float, postscale: float
    ) -> torch.Tensor:
        ctx.options = (op, prescale, postscale)
        return allreduce_async(
            tensor, op=op, prescale_factor=prescale, postscale_factor=postscale
        ).wait()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        op, prescale, postscale = ctx.options
        reduced = allreduce_async(grad, op=op, prescale_factor=prescale, postscale_factor=postscale)
        return reduced.wait(), None, None, None


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        handle, rows = _gather(tensor.detach())
        # This rank's rows: after those of every rank before it.
        ctx.start = sum(rows[: state.rank()])
        ctx.rows = rows[state.rank()]
        return handle.wait()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        summed = allreduce_async(grad, op=ReduceOp.SUM).wait()
        return summed[ctx.start : ctx.start + ctx.rows]


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int) -> torch.Tensor:
        ctx.root_rank = root_rank
        return broadcast_async(tensor, root_rank).wait()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        summed = allreduce_async(grad, op=ReduceOp.SUM).wait()
        if state.rank() != ctx.root_rank:
            summed.zero_()
        return summed, None
