"""Lets SageMaker data-parallel scripts pin a GPU on a machine that has none.

The SageMaker scripts call ``torch.cuda.set_device(dist.get_local_rank())`` right after
init, unguarded. Without CUDA that call can only raise (a CPU build of torch has no CUDA
runtime at all), so the script would die before choosing its device.

The choice: when, and only when, a job initialises through the SageMaker compatibility
layer on a machine without CUDA, ``torch.cuda.set_device`` is replaced by a function that
logs once and does nothing. Alternatives rejected:
- asking scripts to guard the call breaks "runs as written";
- answering -1 from get_local_rank() (torch ignores negative devices) would corrupt data
  sharding that uses the local rank;
- replacing more of torch.cuda (is_available, device) would hide real mistakes.
The replacement is never installed where CUDA exists, and where it is installed the
original could only raise, so no call that used to work behaves differently. The original
stays reachable as ``torch.cuda.set_device.__wrapped__``.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch

_log = logging.getLogger(__name__)
_MARKER = "_runyard_cpu_fallback"


def allow_cuda_pinning_without_cuda() -> bool:
    """Installs the no-op where CUDA is missing; returns whether it is in place."""
    if torch.cuda.is_available():
        return False
    original = torch.cuda.set_device
    if getattr(original, _MARKER, False):
        return True
    warned = False

    @functools.wraps(original)
    def set_device_without_cuda(device: Any) -> None:
        nonlocal warned
        if not warned:
            warned = True
            _log.warning(
                "no CUDA device here: torch.cuda.set_device(%r) is ignored and the job "
                "trains on the CPU",
                device,
            )

    setattr(set_device_without_cuda, _MARKER, True)
    torch.cuda.set_device = set_device_without_cuda
    return True
