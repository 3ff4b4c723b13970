"""``hvd.init()`` and where this process stands: rank, size, and its place among the
instances.

Under mpirun each process knows its rank from Open MPI's variables (the rank shim adds
torch's) and the rendezvous from MASTER_ADDR/MASTER_PORT, which Runyard forwards to every
rank: ``init`` joins torch's default process group through Runyard's data-parallel
library, which also learns which processes share an instance. A process started alone
(no rank in its environment) is a job of one, as with Horovod.

Horovod's names map as: ``local_*`` among the processes of this instance, ``cross_*``
among the instances (this process's instance is number ``cross_rank()``).
"""

from __future__ import annotations

import atexit
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from libraries.dataparallel import process_group
from libraries.dataparallel.placement import names_a_rank
from libraries.horovod.refusals import NotOfferedError

# Whatever device a tensor lives on: gloo carries CPU tensors, NCCL CUDA ones (Horovod
# reduces both in one job).
_CPU_AND_CUDA = "cpu:gloo,cuda:nccl"


@dataclass(frozen=True)
class Layout:
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    homogeneous: bool


_layout: Layout | None = None


def init(comm: object | None = None, process_sets: object | None = None) -> None:
    """Joins the job's processes; again after it has, does nothing."""
    global _layout
    if comm is not None:
        raise NotOfferedError(
            "hvd.init(comm=...)",
            "the job's processes are always every rank mpirun started; an mpi4py "
            "communicator cannot pick a subset of them",
        )
    if process_sets is not None:
        raise NotOfferedError("hvd.init(process_sets=...)", "every collective spans the whole job")
    if _layout is not None and dist.is_initialized():
        return
    if names_a_rank(os.environ):
        process_group.init_process_group(_backend())
        _layout = _from_topology()
        # As Horovod does, scripts need not call shutdown(): it runs as the interpreter
        # ends (once, however often init() ran).
        atexit.unregister(_shutdown_at_exit)
        atexit.register(_shutdown_at_exit)
    else:
        _layout = Layout(0, 1, 0, 1, 0, 1, homogeneous=True)


def shutdown() -> None:
    """Leaves the job's processes once every rank has called it (or ended its script)."""
    global _layout
    _layout = None
    process_group.every_rank_at_the_end()
    process_group.destroy_process_group()


def _shutdown_at_exit() -> None:
    # After an uncaught exception mpirun ends every rank: nothing is waited for or taken down.
    if _layout is not None and not hasattr(sys, "last_value"):
        shutdown()


def is_initialized() -> bool:
    return _layout is not None


def layout() -> Layout:
    if _layout is None:
        raise ValueError("Horovod is not initialised yet: call hvd.init() first")
    return _layout


def distributed() -> bool:
    """Whether collectives must reach other processes (a job of one needs none)."""
    return layout().size > 1


def rank() -> int:
    return layout().rank


def size() -> int:
    return layout().size


def local_rank() -> int:
    return layout().local_rank


def local_size() -> int:
    return layout().local_size


def cross_rank() -> int:
    return layout().cross_rank


def cross_size() -> int:
    return layout().cross_size


def is_homogeneous() -> bool:
    """Whether every instance runs as many processes."""
    return layout().homogeneous


def _backend() -> str:
    return _CPU_AND_CUDA if torch.cuda.is_available() else "gloo"


def _from_topology() -> Layout:
    # Every process is in init() together: where the group was made without Runyard (the
    # script called torch.distributed.init_process_group itself), a collective may learn
    # the instances.
    topology = process_group.topology(collective=True)
    sizes = {len(ranks) for ranks in topology.instances}
    return Layout(
        rank=topology.rank,
        size=topology.world_size,
        local_rank=topology.local_rank,
        local_size=topology.local_size,
        cross_rank=topology.instance_index,
        cross_size=len(topology.instances),
        homogeneous=len(sizes) == 1,
    )
