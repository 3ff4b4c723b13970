"""Replicas agreeing on their gradients: the mean over a group, in one collective per
step and type rather than one per parameter (a model of many small tensors would otherwise
pay a round trip for each)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor


def average(
    parameters: Iterable[nn.Parameter],
    group: dist.ProcessGroup,
    size: int,
    *,
    divisor: int | None = None,
) -> None:
    """Each parameter's gradient (its local shard, for a DTensor) becomes the mean of the
    ``size`` ranks of ``group``: their sum divided by ``size``, or by ``divisor``."""
    divisor = size if divisor is None else divisor
    if size == 1 and divisor == 1:
        return
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for parameter in parameters:
        grad = parameter.grad
        if grad is not None:
            local = grad.to_local() if isinstance(grad, DTensor) else grad
            by_dtype.setdefault(local.dtype, []).append(local)
    for grads in by_dtype.values():
        flat = torch.cat([grad.reshape(-1) for grad in grads])
        if size > 1:
            dist.all_reduce(flat, group=group)
        flat.div_(divisor)
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
