"""The few places where SageMaker's API means more than Runyard's own; the
``smdistributed`` compatibility package re-exports these."""

from __future__ import annotations

from datetime import timedelta

from libraries.dataparallel.cuda_pinning import allow_cuda_pinning_without_cuda
from libraries.dataparallel.process_group import init_process_group as _init_process_group


def init_process_group(backend: str | None = None, *, timeout: timedelta | None = None) -> None:
    """As Runyard's, plus: on a machine without CUDA, the ``torch.cuda.set_device(
    dist.get_local_rank())`` that SageMaker scripts call next becomes a logged no-op
    (cuda_pinning.py says why that is the least surprising choice)."""
    _init_process_group(backend, timeout=timeout)
    allow_cuda_pinning_without_cuda()
