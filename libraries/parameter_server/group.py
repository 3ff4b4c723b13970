"""Joining and leaving the RPC group that all servers and workers of a job form.

The group is static: every process of the job (servers and workers) joins it once, with
the rank the launcher gave it, and leaves it once.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

import torch.distributed.rpc as rpc

from libraries.parameter_server.contract import ClusterContract
from libraries.parameter_server.errors import ParameterServerError

DEFAULT_JOIN_TIMEOUT_S = 600.0
# Only started once every worker has finished, so it waits for processes that are already
# on their way out; a process that died in between must not hold the others forever.
FINAL_BARRIER_TIMEOUT_S = 60.0
JOIN_FAILED_EXIT_CODE = 1


def join(contract: ClusterContract, join_timeout_s: float) -> None:
    """Join the group, or end this process if the whole group has not met in time.

    torch's rendezvous waits up to 30 minutes for a missing peer inside a native call that
    cannot be interrupted; a process that never started (a failed instance) must fail the
    job sooner, hence a watchdog that exits the process.
    """
    joined = threading.Event()
    watchdog = threading.Thread(
        target=_exit_unless_joined,
        args=(joined, contract, join_timeout_s),
        name="ps-join-watchdog",
        daemon=True,
    )
    watchdog.start()
    # rpc_timeout bounds torch's own calls while the group forms; every call of this
    # library names its own timeout.
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=contract.init_method, rpc_timeout=join_timeout_s
    )
    try:
        with warnings.catch_warnings():
            # torch's own device-map exchange inside init_rpc uses an API it has deprecated;
            # the warning says nothing to the user and would break PYTHONWARNINGS=error.
            warnings.filterwarnings(
                "ignore", message="You are using a Backend", category=UserWarning
            )
            rpc.init_rpc(  # type: ignore[no-untyped-call]  # unannotated in torch
                contract.rpc_name,
                rank=contract.rank,
                world_size=contract.world_size,
                rpc_backend_options=options,
            )
    except RuntimeError as error:  # e.g. the rendezvous host gave up first and closed it
        raise ParameterServerError(
            f"{contract.rpc_name} could not join the parameter-server group at "
            f"{contract.init_method}: {error}"
        ) from error
    finally:
        # An error raised here is the caller's to report; the watchdog is for hangs.
        joined.set()


def leave(*, graceful: bool) -> None:
    """Graceful: a barrier with every other process, after all in-flight replies are sent.
    Otherwise: drop this process's connections at once (after a failure)."""
    if graceful:
        rpc.shutdown(graceful=True, timeout=FINAL_BARRIER_TIMEOUT_S)
    else:
        rpc.shutdown(graceful=False)


def _exit_unless_joined(
    joined: threading.Event, contract: ClusterContract, join_timeout_s: float
) -> None:
    if joined.wait(join_timeout_s):
        return
    print(
        f"{contract.rpc_name} gave up after {join_timeout_s:g} s "
        f"waiting for all {contract.world_size} processes to join at {contract.init_method}",
        file=sys.stderr,
        flush=True,
    )
    os._exit(JOIN_FAILED_EXIT_CODE)
