"""Horovod's gradient compression: ``hvd.Compression.none`` and ``hvd.Compression.fp16``.

A compressor turns a tensor into what travels (``compress``, returning it and whatever
``decompress`` needs to undo that) and back. Scripts may pass a ``Compressor`` of their
own; the two built in are also known to Runyard's reducer, which averages fp16 gradients
with float32 sums (sharded_reduce.py) instead of adding them in half precision.
"""

from __future__ import annotations

from typing import Any

import torch


class Compressor:
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class NoneCompressor(Compressor):
    pass


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16; others as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        if not tensor.dtype.is_floating_point:
            return tensor, None
        return tensor.to(torch.float16), tensor.dtype

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor if ctx is None else tensor.to(ctx)


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
