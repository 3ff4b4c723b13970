"""A worker's membership in the job: joining the group, heartbeats, and leaving it.

Heartbeats let servers tell a worker that is busy (a long step, a sync step waiting for
the others) from one that died: each server presumes a worker dead once it has heard
nothing from it for its worker timeout, and then fails the job instead of waiting forever.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed.rpc as rpc

from libraries.parameter_server import group, server
from libraries.parameter_server.contract import ROLE, ClusterContract, read_contract, server_name
from libraries.parameter_server.errors import ParameterServerError
from libraries.parameter_server.protocol import Refused, ShardStats

HEARTBEAT_INTERVAL_S = 1.0
HEARTBEAT_TIMEOUT_S = 10.0
# Calls answered at once (heartbeat, pull, stats); waiting calls have no timeout because
# the servers themselves fail them when a worker is lost.
PROMPT_CALL_TIMEOUT_S = 300.0
NO_TIMEOUT = 0.0


@dataclass
class _Session:
    contract: ClusterContract
    heartbeat: _Heartbeat
    has_trainer: bool = False


_session: _Session | None = None
_lock = threading.Lock()


def init(*, join_timeout_s: float = group.DEFAULT_JOIN_TIMEOUT_S) -> None:
    """Join the job's parameter-server group as the worker the env contract names.

    Blocks until every server and worker has joined; ends the process with status 1 if
    that takes longer than ``join_timeout_s``.
    """
    global _session
    with _lock:
        if _session is not None:
            raise ParameterServerError("init() was already called in this process")
        contract = read_contract()
        if contract.role != "worker":
            raise ParameterServerError(
                f"init() is for workers but {ROLE}={contract.role}; servers run "
                "`python -m libraries.parameter_server`"
            )
        group.join(contract, join_timeout_s)
        heartbeat = _Heartbeat(contract)
        heartbeat.start()
        _session = _Session(contract, heartbeat)
        atexit.register(_abandon_at_exit)


def shutdown() -> None:
    """Leave the job: tell every server this worker is done and wait for the others.

    Returns once every worker has called ``shutdown()``, after which the servers exit.
    Raises ``ParameterServerError`` if a server failed (a lost worker) or went away.
    """
    global _session
    with _lock:
        session = _current()
        _session = None
    session.heartbeat.stop()
    worker = session.contract.index
    try:
        call_servers(
            session.contract, server.remote_finish, lambda _: (worker,), timeout_s=NO_TIMEOUT
        )
    except ParameterServerError:
        group.leave(graceful=False)
        raise
    try:
        group.leave(graceful=True)
    except RuntimeError as error:
        raise ParameterServerError(f"leaving the parameter-server group failed: {error}") from error


def worker_index() -> int:
    """This worker's index, 0..num_workers()-1 (instance order, then local rank)."""
    return _current().contract.index


def num_workers() -> int:
    return _current().contract.num_workers


def num_servers() -> int:
    return _current().contract.num_servers


def server_stats() -> list[ShardStats]:
    """What each server holds and has seen, in server order."""
    contract = _current().contract
    stats: list[ShardStats] = call_servers(
        contract, server.remote_stats, lambda _: (), timeout_s=PROMPT_CALL_TIMEOUT_S
    )
    return stats


def call_servers(
    contract: ClusterContract,
    function: Callable[..., Any],
    arguments: Callable[[int], tuple[Any, ...]],
    *,
    timeout_s: float,
) -> list[Any]:
    """Call ``function`` on every server at once; results in server order."""
    futures = [
        rpc.rpc_async(server_name(index), function, args=arguments(index), timeout=timeout_s)
        for index in range(contract.num_servers)
    ]
    return [_result(index, future) for index, future in enumerate(futures)]


def claim_trainer() -> ClusterContract:
    """The contract, for the one Trainer this process may create."""
    with _lock:
        session = _current()
        if session.has_trainer:
            raise ParameterServerError("a worker trains one model: Trainer was already created")
        session.has_trainer = True
        return session.contract


def _current() -> _Session:
    if _session is None:
        raise ParameterServerError("call libraries.parameter_server.init() first")
    return _session


def _result(server_index: int, future: Any) -> Any:
    try:
        value = future.wait()
    except RuntimeError as error:  # the server went away, or raised
        raise ParameterServerError(f"parameter server {server_index}: {error}") from error
    if isinstance(value, Refused):
        raise ParameterServerError(f"parameter server {server_index}: {value.reason}")
    return value


def _abandon_at_exit() -> None:
    # A script that ends without shutdown() (an exception, an early exit) drops its
    # connections instead of hanging in exit; the servers notice the silence and fail.
    global _session
    with _lock:
        session, _session = _session, None
    if session is not None:
        session.heartbeat.stop()
        group.leave(graceful=False)


class _Heartbeat:
    def __init__(self, contract: ClusterContract) -> None:
        self._contract = contract
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ps-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        worker = self._contract.index
        while not self._stop.wait(HEARTBEAT_INTERVAL_S):
            try:
                call_servers(
                    self._contract,
                    server.remote_heartbeat,
                    lambda _: (worker,),
                    timeout_s=HEARTBEAT_TIMEOUT_S,
                )
            except ParameterServerError:
                # A server that went away fails the training calls themselves, with
                # their context; a missed beat here has nothing to add.
                continue
