"""The server process: its RPC endpoints and its life from joining to exit.

Workers call the ``remote_*`` functions below through ``torch.distributed.rpc``, which
finds a function by its module path; that is why they are module-level and reach the
process's one shard through a module global.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, ParamSpec

import torch.distributed.rpc as rpc

from libraries.parameter_server import group
from libraries.parameter_server.contract import ClusterContract
from libraries.parameter_server.errors import ParameterServerError
from libraries.parameter_server.protocol import (
    OptimizerFactory,
    Refused,
    ShardStats,
    TrainingConfig,
)
from libraries.parameter_server.shard import ShardServer, Tensors

DEFAULT_WORKER_TIMEOUT_S = 120.0
# After a failure the waiting workers are answered with its reason; replies go out on
# the agent's threads and give no signal once sent, so they get this long before exit.
ERROR_REPLY_GRACE_S = 1.0

logger = logging.getLogger(__name__)
P = ParamSpec("P")

_shard: ShardServer | None = None


def _async_rpc(function: Callable[P, Any]) -> Callable[P, Any]:
    """torch's ``async_execution`` (the reply is sent when the returned future completes),
    keeping the signature that torch's unannotated decorator would erase."""
    decorated: Callable[P, Any] = rpc.functions.async_execution(function)  # type: ignore[no-untyped-call]
    return decorated


def _installed() -> ShardServer:
    if _shard is None:
        raise ParameterServerError("this process is not a parameter server")
    return _shard


@_async_rpc
def remote_register(
    worker: int, config: TrainingConfig, parameters: Tensors, optimizer_factory: OptimizerFactory
) -> Any:
    return _installed().register(worker, config, parameters, optimizer_factory)


@_async_rpc
def remote_push(worker: int, step: int, gradients: Tensors) -> Any:
    return _installed().push(worker, step, gradients)


def remote_pull() -> Tensors | Refused:
    return _installed().pull()


def remote_heartbeat(worker: int) -> None:
    _installed().heartbeat(worker)


@_async_rpc
def remote_finish(worker: int) -> Any:
    return _installed().finish(worker)


def remote_stats() -> ShardStats:
    return _installed().stats()


def serve(contract: ClusterContract, *, worker_timeout_s: float, join_timeout_s: float) -> int:
    """Serve one shard until every worker has finished (0) or one is lost (1)."""
    global _shard
    if contract.role != "server":
        raise ParameterServerError(f"{contract.rpc_name} is a {contract.role}, not a server")
    # Installed before joining: workers may call as soon as the group has formed.
    shard = _shard = ShardServer(contract.index, contract.num_workers, worker_timeout_s)
    group.join(contract, join_timeout_s)
    shard.start_worker_timeout()
    logger.info(
        "parameter server %d of %d serving %d workers",
        contract.index,
        contract.num_servers,
        contract.num_workers,
    )
    failure = shard.wait_until_finished(poll_s=min(1.0, worker_timeout_s / 4))
    if failure is not None:
        logger.error("parameter server %d failed: %s", contract.index, failure)
        time.sleep(ERROR_REPLY_GRACE_S)
        group.leave(graceful=False)
        return 1
    try:
        group.leave(graceful=True)
    except RuntimeError:
        logger.exception("parameter server %d: the final barrier failed", contract.index)
        return 1
    logger.info("parameter server %d: all workers finished", contract.index)
    return 0
