"""The script's wrapped model and optimizer as the library's state holds them.

``smp.DistributedModel`` and ``smp.DistributedOptimizer`` put themselves in the process's
state, which every module of the library reads. The state cannot name their classes (their
modules import it), so it holds them as these protocols: what the modules below ``model``
and ``optimizer`` ask of them. A module above ``model`` gets its class back with
``model.distributed_model``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from torch import nn


class WrappedModel(Protocol):
    @property
    def pipeline(self) -> object | None:
        """The model's pipeline stages: None until the first step splits it (or where it
        is never split)."""
        ...


class WrappedOptimizer(Protocol):
    @property
    def loss_scale(self) -> float: ...

    def keep_only(self, stage: nn.Module, stand_ins: Mapping[int, nn.Parameter]) -> None:
        """Steps ``stage``'s parameters only (and a tied parameter as its copy)."""
        ...
