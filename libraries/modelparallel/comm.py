"""Ranks, groups and the small collectives scripts call: ``smp.rank()``, ``smp.barrier()``,
``smp.broadcast(obj, group)`` with ``smp.recv_from(rank, rank_type)``."""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch.distributed as dist

from libraries.modelparallel import state as smp_state


class CommGroup(Enum):
    WORLD = 0
    PP_GROUP = 1
    DP_GROUP = 2
    RDP_GROUP = 3
    MP_GROUP = 4
    TP_GROUP = 5


class RankType(Enum):
    WORLD_RANK = 0
    PP_RANK = 1
    DP_RANK = 2
    RDP_RANK = 3
    MP_RANK = 4
    TP_RANK = 5


WORLD = CommGroup.WORLD
PP_GROUP = CommGroup.PP_GROUP
DP_GROUP = CommGroup.DP_GROUP
RDP_GROUP = CommGroup.RDP_GROUP
MP_GROUP = CommGroup.MP_GROUP
TP_GROUP = CommGroup.TP_GROUP


def rank() -> int:
    return smp_state.current().rank


def size() -> int:
    return smp_state.current().topology.world_size


def local_rank() -> int:
    return smp_state.current().local_rank


def local_size() -> int:
    return smp_state.current().local_size


def pp_rank() -> int:
    return smp_state.current().pp_rank


def pp_size() -> int:
    return smp_state.current().topology.pp_size


def dp_rank() -> int:
    return smp_state.current().dp_rank


def dp_size() -> int:
    return smp_state.current().topology.dp_size


def tp_rank() -> int:
    return smp_state.current().tp_rank


def tp_size() -> int:
    return smp_state.current().topology.tp_size


def rdp_rank() -> int:
    return smp_state.current().rdp_rank


def rdp_size() -> int:
    return smp_state.current().topology.rdp_size


# The model-parallel group holds one replica: its stages' tensor-parallel groups, stage by
# stage (the pipeline group without tensor parallelism, the tensor-parallel group without
# stages), as SageMaker's library ranks them.
def mp_rank() -> int:
    state = smp_state.current()
    return state.topology.mp_rank(state.rank)


def mp_size() -> int:
    return tp_size() * pp_size()


def _process_group(group: CommGroup) -> dist.ProcessGroup | None:
    state = smp_state.current()
    if group == CommGroup.TP_GROUP:
        return state.tp_group
    if group == CommGroup.MP_GROUP:
        return state.mp_group
    if group == CommGroup.PP_GROUP:
        return state.pp_group
    if group == CommGroup.RDP_GROUP:
        return state.rdp_group
    if group == CommGroup.DP_GROUP:
        return state.dp_group
    return None


def _members(group: CommGroup) -> list[int]:
    state = smp_state.current()
    topology = state.topology
    if group == CommGroup.TP_GROUP:
        return topology.tp_group(state.rdp_rank, state.pp_rank)
    if group == CommGroup.MP_GROUP:
        return topology.mp_group(state.rdp_rank)
    if group == CommGroup.PP_GROUP:
        return topology.pp_group(state.dp_rank)
    if group == CommGroup.RDP_GROUP and topology.tp_size > 1:
        return topology.rdp_group(state.tp_rank, state.pp_rank)
    if group in (CommGroup.DP_GROUP, CommGroup.RDP_GROUP):
        return topology.dp_group(state.pp_rank)
    return list(range(topology.world_size))


# -- the groups as torch.distributed sees them, and as lists of ranks ---------------------


def get_world_process_group() -> dist.ProcessGroup:
    return _torch_group(CommGroup.WORLD)


def get_mp_process_group() -> dist.ProcessGroup:
    return _torch_group(CommGroup.MP_GROUP)


def get_tp_process_group() -> dist.ProcessGroup:
    return _torch_group(CommGroup.TP_GROUP)


def get_pp_process_group() -> dist.ProcessGroup:
    return _torch_group(CommGroup.PP_GROUP)


def get_dp_process_group() -> dist.ProcessGroup:
    return _torch_group(CommGroup.DP_GROUP)


def get_rdp_process_group() -> dist.ProcessGroup:
    return _torch_group(CommGroup.RDP_GROUP)


def get_world_group() -> list[int]:
    return _members(CommGroup.WORLD)


def get_mp_group() -> list[int]:
    return _members(CommGroup.MP_GROUP)


def get_tp_group() -> list[int]:
    return _members(CommGroup.TP_GROUP)


def get_pp_group() -> list[int]:
    return _members(CommGroup.PP_GROUP)


def get_dp_group() -> list[int]:
    return _members(CommGroup.DP_GROUP)


def get_rdp_group() -> list[int]:
    return _members(CommGroup.RDP_GROUP)


def _torch_group(group: CommGroup) -> dist.ProcessGroup:
    """The group's ProcessGroup, for torch.distributed's own collectives. The library
    keeps none for a tensor-parallel group of one rank (no tensor parallelism): that one
    is made when first asked for, by its one member alone."""
    if group == CommGroup.WORLD:
        world = dist.group.WORLD
        assert world is not None  # smp.init made it
        return world
    made = _process_group(group)
    if made is not None:
        return made
    state = smp_state.current()
    if state.alone is None:
        state.alone = dist.new_group([state.rank], use_local_synchronization=True)
    return state.alone


def barrier(group: CommGroup = CommGroup.WORLD) -> None:
    if len(_members(group)) == 1:
        return  # a group of one: nothing to wait for
    dist.barrier(group=_process_group(group))


def dp_barrier() -> None:
    barrier(CommGroup.DP_GROUP)


def pp_barrier() -> None:
    barrier(CommGroup.PP_GROUP)


def mp_barrier() -> None:
    barrier(CommGroup.MP_GROUP)


def broadcast(obj: Any, group: CommGroup = CommGroup.WORLD) -> None:
    """Sends ``obj`` to every other member of ``group``; each receives it with
    ``recv_from`` naming this rank."""
    state = smp_state.current()
    for member in _members(group):
        if member != state.rank:
            dist.send_object_list([obj], dst=member)


def send(obj: Any, dest_rank: int, rank_type: RankType) -> None:
    dist.send_object_list([obj], dst=_global_rank(dest_rank, rank_type))


def recv_from(src_rank: int, rank_type: RankType) -> Any:
    received: list[Any] = [None]
    dist.recv_object_list(received, src=_global_rank(src_rank, rank_type))
    return received[0]


def _global_rank(rank_in_group: int, rank_type: RankType) -> int:
    state = smp_state.current()
    topology = state.topology
    if rank_type == RankType.TP_RANK:
        return topology.tp_group(state.rdp_rank, state.pp_rank)[rank_in_group]
    if rank_type == RankType.MP_RANK:
        return topology.mp_group(state.rdp_rank)[rank_in_group]
    if rank_type == RankType.RDP_RANK and topology.tp_size > 1:
        return topology.rdp_group(state.tp_rank, state.pp_rank)[rank_in_group]
    if rank_type == RankType.PP_RANK:
        return topology.rank_of(rank_in_group, state.dp_rank)
    if rank_type in (RankType.DP_RANK, RankType.RDP_RANK):
        return topology.rank_of(state.pp_rank, rank_in_group)
    return rank_in_group
