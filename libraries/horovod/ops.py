"""Horovod's reduction operations (``hvd.Average``, ``hvd.Sum``, ...) and their
torch.distributed counterparts."""

from __future__ import annotations

from enum import IntEnum

import torch.distributed as dist

from libraries.horovod.refusals import NotOfferedError


class ReduceOp(IntEnum):
    AVERAGE = 0
    SUM = 1
    ADASUM = 2
    MIN = 3
    MAX = 4
    PRODUCT = 5


Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM
Adasum = ReduceOp.ADASUM
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT

_TORCH = {
    # An average is a sum divided afterwards (or by Runyard's reducer).
    ReduceOp.AVERAGE: dist.ReduceOp.SUM,
    ReduceOp.SUM: dist.ReduceOp.SUM,
    ReduceOp.MIN: dist.ReduceOp.MIN,
    ReduceOp.MAX: dist.ReduceOp.MAX,
    ReduceOp.PRODUCT: dist.ReduceOp.PRODUCT,
}

_ADASUM_WHY = (
    "Adasum's adaptive summation is Horovod's own algorithm and has no torch.distributed "
    "counterpart; use op=hvd.Average (or hvd.Sum)"
)


def resolve(op: int | None, average: bool | None = None) -> ReduceOp:
    """The operation a call asks for: ``op``, or the older ``average`` flag, or Average."""
    if op is not None and average is not None:
        raise ValueError("give op= or the older average=, not both")
    if op is None:
        return ReduceOp.SUM if average is False else ReduceOp.AVERAGE
    try:
        chosen = ReduceOp(op)
    except ValueError:
        raise ValueError(f"op={op!r} is not one of Horovod's operations") from None
    if chosen is ReduceOp.ADASUM:
        raise NotOfferedError("op=hvd.Adasum", _ADASUM_WHY)
    return chosen


def torch_op(op: ReduceOp) -> dist.ReduceOp.RedOpType:
    return _TORCH[op]
