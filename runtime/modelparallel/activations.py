"""``offload_activations``: what the backward pass keeps of a forward (the inputs of the
modules under activation checkpointing, and everything else's saved tensors) waits in
host memory instead of the GPU's, through torch's ``save_on_cpu`` hooks, and is copied
back when the backward needs it. On CPU the activations are in host memory already, so
there is nothing to move; the job's log says so once."""

from __future__ import annotations

import contextlib
from typing import Any

from torch.autograd.graph import save_on_cpu

from runtime.modelparallel import state as smp_state


def offloaded(state: smp_state.State) -> contextlib.AbstractContextManager[Any]:
    if not state.parameters.offload_activations:
        return contextlib.nullcontext()
    if state.device.type != "cuda":
        state.say_once("offload_activations: activations stay in host memory on CPU")
        return contextlib.nullcontext()
    return save_on_cpu(pin_memory=True)
