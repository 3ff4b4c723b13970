"""What workers and servers exchange, besides tensors.

Everything here crosses process boundaries through the RPC pickler, so it is plain data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["async", "sync"]
MODES: tuple[Mode, ...] = ("async", "sync")

# Builds the optimizer of one shard from that shard's tensors, e.g.
# ``functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)``. It travels to the servers
# with pickle, so it must be importable by name there (no lambdas or local functions).
OptimizerFactory = Callable[[list[Any]], Any]


@dataclass(frozen=True)
class TrainingConfig:
    """How a server applies updates; every worker must send the same one."""

    mode: Mode
    max_staleness: int | None


@dataclass(frozen=True)
class Refused:
    """A server's answer to a call it will not carry out; the worker raises ``reason``."""

    reason: str


@dataclass(frozen=True)
class ShardStats:
    """What one server holds and has seen, for monitoring and tests."""

    server_index: int
    config: TrainingConfig | None
    parameter_names: tuple[str, ...]
    numel: int
    # Steps received from each worker (its clock), indexed by worker index.
    clocks: tuple[int, ...]
    # Workers whose last push has not been answered yet: a sync step still waiting for
    # the others, or an async worker held back by the staleness bound.
    waiting: tuple[int, ...]
    finished: tuple[int, ...]
    updates_applied: int
    # The largest lead (own clock minus the slowest running worker's clock) with which
    # any worker was let go on to its next step.
    max_lead: int
