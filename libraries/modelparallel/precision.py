"""bf16 and fp16 as the job's parameters ask: FSDP's mixed-precision policy where the
model states are sharded, autocast elsewhere (replicas and pipeline stages)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from libraries.modelparallel import state as smp_state


def low_precision(state: smp_state.State) -> torch.dtype | None:
    if state.parameters.bf16:
        return torch.bfloat16
    if state.parameters.fp16:
        return torch.float16
    return None


def autocast(state: smp_state.State) -> contextlib.AbstractContextManager[Any]:
    # Sharded states compute in low precision by FSDP's policy; the rest by autocast.
    dtype = low_precision(state)
    if dtype is None or state.mesh is not None:
        return contextlib.nullcontext()
    return torch.autocast(state.device.type, dtype=dtype)
