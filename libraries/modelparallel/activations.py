"""``offload_activations``: what the backward pass keeps of a forward (the inputs of the
modules under activation checkpointing, and everything else's saved tensors) waits in
host memory instead of the GPU's, and is copied back before the backward needs it.

``activation_loading_horizon`` (h) bounds how early: when the backward takes back an
activation, the h offloaded before it that it has not taken yet are loaded back to the
GPU ahead of time, on a stream of their own, so the copies overlap the backward's compute
while no more than h wait on the GPU at once. The backward takes activations back in about
the reverse order they were saved in, microbatch by microbatch, which is the order they
are loaded back in.

On CPU the activations are in host memory already, so there is nothing to move; the job's
log says so once.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.graph import saved_tensors_hooks

from libraries.modelparallel import state as smp_state


def offloaded(state: smp_state.State) -> contextlib.AbstractContextManager[Any]:
    if not state.parameters.offload_activations:
        return contextlib.nullcontext()
    if state.device.type != "cuda":
        state.say_once("offload_activations: activations stay in host memory on CPU")
        return contextlib.nullcontext()
    return Offloader(state.device, state.parameters.activation_loading_horizon).hooks()


@dataclass
class _Saved:
    host: torch.Tensor
    # On the device again, and when the copy is done (None: not loaded back).
    loaded: torch.Tensor | None = None
    ready: Any = None
    taken: bool = False


class Offloader:
    """Saved tensors on ``device`` go to host memory; each is loaded back at most
    ``horizon`` takes ahead of the backward taking it."""

    def __init__(self, device: torch.device, horizon: int) -> None:
        self.device = device
        self.horizon = horizon
        self._saved: list[_Saved] = []
        self._cuda = device.type == "cuda"
        self._stream = torch.cuda.Stream(device) if self._cuda else None  # type: ignore[no-untyped-call]
        # What the schedule did: the most tensors loaded back and not yet taken at once,
        # and how many takes found their tensor not loaded back yet.
        self.most_ahead = 0
        self.late = 0
        self._ahead = 0  # loaded back, not taken yet

    def hooks(self) -> contextlib.AbstractContextManager[Any]:
        return saved_tensors_hooks(self.pack, self.unpack)

    def pack(self, tensor: torch.Tensor) -> Any:
        if tensor.device != self.device:
            return tensor  # already elsewhere (a CPU tensor): kept as it is
        host = torch.empty(
            tensor.size(), dtype=tensor.dtype, layout=tensor.layout, pin_memory=self._cuda
        )
        host.copy_(tensor)
        self._saved.append(_Saved(host))
        return len(self._saved) - 1

    def unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        saved = self._saved[packed]
        if saved.loaded is None:
            self.late += 1
            self._load(saved)
        assert saved.loaded is not None
        tensor: torch.Tensor = saved.loaded
        if self._cuda:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(saved.ready)
            tensor.record_stream(current)
        # Taken: the GPU copy is the backward's now; a second take loads it again.
        saved.loaded, saved.ready, saved.taken = None, None, True
        self._ahead -= 1
        self._load_ahead(packed)
        self.most_ahead = max(self.most_ahead, self._ahead)
        return tensor

    def _load_ahead(self, index: int) -> None:
        """Loads back the tensors saved before ``index`` that are neither taken nor
        loaded yet, nearest first, until ``horizon`` wait."""
        for earlier in range(index - 1, -1, -1):
            if self._ahead >= self.horizon:
                return
            saved = self._saved[earlier]
            if not saved.taken and saved.loaded is None:
                self._load(saved)

    def _load(self, saved: _Saved) -> None:
        self._ahead += 1
        if self._stream is None:
            saved.loaded = saved.host.to(self.device)
            return
        with torch.cuda.stream(self._stream):
            saved.loaded = saved.host.to(self.device, non_blocking=True)
            saved.ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            saved.ready.record(self._stream)
