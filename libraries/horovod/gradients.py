"""Averaging an optimizer's gradients while backward goes on, as Horovod's
DistributedOptimizer does.

Each parameter's gradient is final once autograd has accumulated it the promised number
of times (``backward_passes_per_step``); a hook on the parameter counts that. Gradients go
to the other processes in fusion buckets: parameters in reverse order (roughly the order
backward finishes them), one dtype and device per bucket, up to ``HOROVOD_FUSION_THRESHOLD``
bytes (by default DDP's 25 MB; 0: one parameter per bucket). A bucket is reduced as soon as
all its gradients are final and every bucket before it has been started: every process
starts the same buckets in the same order, as torch.distributed requires. Those still
waiting when ``synchronize()`` comes (a parameter this step did not use, fewer backward
passes than promised) are reduced then, a missing gradient counting as zeros, as Horovod
counts it.

Averages with ``Compression.none`` or ``Compression.fp16`` go through Runyard's
data-parallel reducer (one allreduce of the bucket on CPU; fp16 carried point to point and
summed in float32); a sum, a ``gradient_predivide_factor`` or a compressor of the script's
own is applied to each gradient and reduced with ``hvd.allreduce``'s own collective.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from libraries.dataparallel.ddp import DEFAULT_BUCKET_CAP_MB
from libraries.dataparallel.hook import ReductionQueue
from libraries.dataparallel.process_group import hierarchy_groups
from libraries.dataparallel.sharded_reduce import Compression as WireCompression
from libraries.dataparallel.sharded_reduce import ShardedReducer, default_shard_exchange
from libraries.horovod import collectives, state
from libraries.horovod.compression import Compressor, FP16Compressor, NoneCompressor
from libraries.horovod.ops import ReduceOp
from libraries.horovod.refusals import NotOfferedError

FUSION_THRESHOLD_VARIABLE = "HOROVOD_FUSION_THRESHOLD"


@dataclass
class _Bucket:
    params: list[torch.nn.Parameter]
    # Gradients not final yet in this step.
    waiting: int
    # The bucket's gradients side by side, for the reducer (None on the per-gradient path).
    flat: torch.Tensor | None = None


class GradientReducer:
    def __init__(
        self,
        params: list[torch.nn.Parameter],
        *,
        compression: type[Compressor] | Compressor,
        op: ReduceOp,
        backward_passes_per_step: int,
        gradient_predivide_factor: float,
        sparse_as_dense: bool,
    ) -> None:
        self.compression = compression
        self.op = op
        self.backward_passes_per_step = backward_passes_per_step
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self._buckets = _plan(params, _fusion_bytes())
        self._bucket_of: dict[torch.Tensor, int] = {
            param: index for index, bucket in enumerate(self._buckets) for param in bucket.params
        }
        self._passes: dict[torch.Tensor, int] = dict.fromkeys(params, 0)
        # The first bucket not started yet this step.
        self._next = 0
        self._in_flight: list[Callable[[], None]] = []
        self._queue = self._library_queue(params)
        self._hooks = [
            param.register_post_accumulate_grad_hook(self._final)  # type: ignore[no-untyped-call]
            for param in params
        ]

    @property
    def started(self) -> bool:
        """Whether reductions of this step have begun (and ``synchronize`` must come)."""
        return self._next > 0

    def synchronize(self) -> None:
        """Every gradient averaged over the processes, in its ``.grad``."""
        while self._next < len(self._buckets):
            self._start(self._buckets[self._next])
            self._next += 1
        for finish in self._in_flight:
            finish()
        self._in_flight = []
        self._next = 0
        self._passes = dict.fromkeys(self._passes, 0)
        for bucket in self._buckets:
            bucket.waiting = len(bucket.params)

    def remove_hooks(self) -> None:
        for hook in self._hooks:
            hook.remove()

    def _final(self, param: torch.Tensor) -> None:
        self._passes[param] += 1
        if self._passes[param] != self.backward_passes_per_step:
            return
        self._buckets[self._bucket_of[param]].waiting -= 1
        while self._next < len(self._buckets) and self._buckets[self._next].waiting == 0:
            self._start(self._buckets[self._next])
            self._next += 1

    def _start(self, bucket: _Bucket) -> None:
        grads = [self._dense_gradient(param) for param in bucket.params]
        if bucket.flat is not None and self._queue is not None:
            self._start_library(bucket.flat, grads)
        else:
            for grad in grads:
                self._start_own(grad)

    def _start_library(self, flat: torch.Tensor, grads: list[torch.Tensor]) -> None:
        offset = 0
        for grad in grads:
            flat[offset : offset + grad.numel()].view_as(grad).copy_(grad)
            offset += grad.numel()
        assert self._queue is not None  # only called when the reducer is in use
        averaged = self._queue.submit(flat)

        def finish() -> None:
            result = averaged.wait()
            start = 0
            for grad in grads:
                grad.copy_(result[start : start + grad.numel()].view_as(grad))
                start += grad.numel()

        self._in_flight.append(finish)

    def _start_own(self, grad: torch.Tensor) -> None:
        wire, ctx = self.compression.compress(grad)
        op, prescale, postscale = self.op, 1.0, 1.0
        if self.op is ReduceOp.AVERAGE and self.gradient_predivide_factor != 1.0:
            # Horovod's split of the average: part before the sum, the rest after.
            op = ReduceOp.SUM
            prescale = 1.0 / self.gradient_predivide_factor
            postscale = self.gradient_predivide_factor / state.size()
        handle = collectives.allreduce_async_(
            wire, op=op, prescale_factor=prescale, postscale_factor=postscale
        )

        def finish() -> None:
            result = self.compression.decompress(handle.wait(), ctx)
            if result is not grad:
                grad.copy_(result)

        self._in_flight.append(finish)

    def _dense_gradient(self, param: torch.nn.Parameter) -> torch.Tensor:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        elif param.grad.is_sparse:
            if not self.sparse_as_dense:
                raise NotOfferedError(
                    "sparse gradients",
                    "pass sparse_as_dense=True to hvd.DistributedOptimizer to reduce them "
                    "as dense tensors",
                )
            param.grad = param.grad.to_dense()
        return param.grad

    def _library_queue(self, params: list[torch.nn.Parameter]) -> ReductionQueue | None:
        """Runyard's reducer, where it computes what was asked: an average, compressed as
        one of Horovod's two built-in compressors, with no predivision."""
        built_in, wire = _wire_compression(self.compression)
        if (
            not params
            or not built_in
            or self.op is not ReduceOp.AVERAGE
            or self.gradient_predivide_factor != 1.0
            or not state.distributed()
        ):
            return None
        for bucket in self._buckets:
            first = bucket.params[0]
            numel = sum(param.numel() for param in bucket.params)
            bucket.flat = torch.empty(numel, dtype=first.dtype, device=first.device)
        reducer = ShardedReducer(
            hierarchy_groups(),
            compression=wire,
            shard_exchange=default_shard_exchange(params[0].device),
        )
        return ReductionQueue(reducer)


def _wire_compression(compression: Any) -> tuple[bool, WireCompression | None]:
    """Whether ``compression`` is one of Horovod's built-in compressors, and what Runyard's
    reducer calls it."""
    kind = compression if isinstance(compression, type) else type(compression)
    if kind in (Compressor, NoneCompressor):
        return True, None
    if kind is FP16Compressor:
        return True, "fp16"
    return False, None


def _fusion_bytes() -> int:
    given = os.environ.get(FUSION_THRESHOLD_VARIABLE, "").strip()
    if not given:
        return int(DEFAULT_BUCKET_CAP_MB * 1024 * 1024)
    try:
        return max(int(given), 0)
    except ValueError:
        raise ValueError(
            f"{FUSION_THRESHOLD_VARIABLE}={given!r} is not a number of bytes"
        ) from None


def _plan(params: list[torch.nn.Parameter], most_bytes: int) -> list[_Bucket]:
    """Buckets of parameters in reverse order, one dtype and device each, each up to
    ``most_bytes`` (a larger parameter alone)."""
    buckets: list[_Bucket] = []
    open_ones: dict[tuple[torch.dtype, torch.device], tuple[_Bucket, int]] = {}
    for param in reversed(params):
        kind = (param.dtype, param.device)
        size = param.numel() * param.element_size()
        bucket, used = open_ones.get(kind, (None, 0))
        if bucket is None or used + size > most_bytes:
            bucket, used = _Bucket([], 0), 0
            buckets.append(bucket)
        bucket.params.append(param)
        bucket.waiting += 1
        open_ones[kind] = (bucket, used + size)
    return buckets
