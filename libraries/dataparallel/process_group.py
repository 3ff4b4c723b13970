"""Initialising the job's default process group and answering where a process stands.

Runyard's ``init_process_group`` rendezvous through its own TCPStore (the same one torch's
env:// method would build) so that every process can publish its instance there; the
instance layout can then be read by any process at any time, with no collective.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

# torch.distributed re-exports these from its C extension without marking them exported,
# which strict mypy refuses; they are the same classes.
from torch._C._distributed_c10d import Store, TCPStore

from libraries.dataparallel import groups as hierarchy
from libraries.dataparallel.placement import current_host, from_environment, names_a_rank
from libraries.dataparallel.topology import Topology, gather_hosts, publish_host, read_hosts

DEFAULT_TIMEOUT = timedelta(minutes=30)
# How long a rank that ends its script waits for the others to end theirs.
EXIT_WAIT = timedelta(minutes=2)


class NotInitializedError(RuntimeError):
    pass


@dataclass
class _Session:
    rank: int
    world_size: int
    host: str
    # Where every rank published its host, or None when the group was initialised
    # without Runyard (then only a collective can learn the layout).
    store: Store | None
    # The default group this describes; None until first use when the session was opened
    # from inside the group's own construction (the smddp backend).
    group: dist.ProcessGroup | None = None
    topology: Topology | None = None
    hierarchy: hierarchy.HierarchyGroups | None = None


_session: _Session | None = None
_session_lock = threading.Lock()


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def init_process_group(backend: str | None = None, *, timeout: timedelta | None = None) -> None:
    """Joins the job's processes into torch's default group, placed as the launcher's
    environment says. A group already initialised (with ``backend="smddp"``, say) is
    adopted as it is."""
    global _session
    if dist.is_initialized():
        return
    placement = from_environment(os.environ)
    timeout = timeout or DEFAULT_TIMEOUT
    store = TCPStore(
        placement.master_addr,
        placement.master_port,
        placement.world_size,
        is_master=placement.rank == 0,
        timeout=timeout,
    )
    dist.init_process_group(
        backend or default_backend(),
        store=store,
        rank=placement.rank,
        world_size=placement.world_size,
        timeout=timeout,
    )
    publish_host(store, placement.rank, placement.host)
    with _session_lock:
        _session = _Session(
            placement.rank,
            placement.world_size,
            placement.host,
            store,
            group=dist.group.WORLD,
        )
    # Waits for every rank's host: init returns with the layout known everywhere.
    topology()


def open_session_in_group_construction(store: Store, rank: int, world_size: int) -> None:
    """For a backend creating the default group (smddp): publish this process's host in
    the group's own store, so the layout can be read later without a collective."""
    global _session
    host = current_host(os.environ)
    publish_host(store, rank, host)
    with _session_lock:
        _session = _Session(rank, world_size, host, store)


def destroy_process_group() -> None:
    global _session
    with _session_lock:
        _session = None
    if dist.is_initialized():
        dist.destroy_process_group()


def every_rank_at_the_end(timeout: timedelta = EXIT_WAIT) -> bool:
    """Waits, as a script ends, until every rank has ended its own; whether they all have.

    A rank must not take its groups down, nor let the interpreter end with them up, while a
    peer may still be sending to it: gloo then aborts the process ("terminate called without
    an active exception") and a finished job fails. False where there is nothing to wait
    for: no group, or this script ended on an uncaught exception (mpirun ends the other
    ranks then; waiting for them would only delay that), or a rank left without this one.
    """
    if not dist.is_initialized() or hasattr(sys, "last_value"):
        return False
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timeout)
        else:
            dist.barrier()
    except RuntimeError:
        return False
    return True


def is_available() -> bool:
    """Whether this process was started as one rank of a distributed job (a script run by
    hand can check this and train alone), with a torch build that can join it."""
    return dist.is_available() and names_a_rank(os.environ)


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank(group: dist.ProcessGroup | None = None) -> int:
    _require_initialized()
    return dist.get_rank(group)


def get_world_size(group: dist.ProcessGroup | None = None) -> int:
    _require_initialized()
    return dist.get_world_size(group)


def get_local_rank() -> int:
    """This process's position among the processes of its instance (by global rank)."""
    return topology().local_rank


def get_local_size() -> int:
    """How many processes run on this process's instance."""
    return topology().local_size


def barrier(group: dist.ProcessGroup | None = None) -> None:
    _require_initialized()
    dist.barrier(group)


def topology(*, collective: bool = False) -> Topology:
    """The instance layout. ``collective`` allows gathering it with a collective when the
    group was initialised without Runyard; only call sites that every process reaches
    together (building a DDP model) may allow that."""
    session = _current_session()
    if session.topology is None:
        if session.store is not None:
            hosts = read_hosts(session.store, session.world_size)
        elif collective:
            hosts = gather_hosts(session.host)
        else:
            raise NotInitializedError(
                "the instance layout is unknown: initialise with "
                "libraries.dataparallel.init_process_group() (or torch.distributed's "
                'init_process_group(backend="smddp")) to use get_local_rank()/get_local_size()'
            )
        session.topology = Topology.from_hosts(hosts, session.rank)
    return session.topology


def hierarchy_groups() -> hierarchy.HierarchyGroups:
    """The instance and cross-instance groups, built once per default group. A
    collective the first time."""
    session = _current_session()
    if session.hierarchy is None:
        session.hierarchy = hierarchy.build(topology(collective=True))
    return session.hierarchy


def _current_session() -> _Session:
    global _session
    _require_initialized()
    world = dist.group.WORLD
    with _session_lock:
        if _session is not None and _session.group is None:
            _session.group = world
        if _session is None or _session.group is not world:
            # Initialised by plain torch.distributed: rank and size are all we know.
            _session = _Session(
                dist.get_rank(), dist.get_world_size(), current_host(os.environ), None, world
            )
        return _session


def _require_initialized() -> None:
    if not is_initialized():
        raise NotInitializedError(
            "the process group is not initialised: call init_process_group() first"
        )
