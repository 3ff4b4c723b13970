"""The two kinds of process group the hierarchical reduction runs on.

``instance``: the processes of one instance, which reduce locally first.
``cross``: the i-th process of every instance; between them, each instance reduces the
shard it owns. With one process per instance the first is skipped, with one instance the
second.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from libraries.dataparallel.topology import Topology


@dataclass(frozen=True)
class HierarchyGroups:
    rank: int
    world_size: int
    instance_count: int
    processes_per_instance: int
    # Global ranks of this process's groups, ascending: torch numbers a group's members in
    # that order, and the reduction relies on it to know who owns which shard.
    instance_ranks: tuple[int, ...]
    cross_ranks: tuple[int, ...]
    instance_group: dist.ProcessGroup | None
    cross_group: dist.ProcessGroup | None

    @property
    def owned_shard(self) -> int:
        """Which of ``instance_count`` shards this process reduces for the cross group:
        its position in that group."""
        return self.cross_ranks.index(self.rank)


def build(topology: Topology) -> HierarchyGroups:
    """A collective: every process creates every group, in the same order, as torch
    requires of ``new_group`` (even for groups it is not a member of)."""
    per_instance = topology.processes_per_instance
    mine_instance: dist.ProcessGroup | None = None
    mine_cross: dist.ProcessGroup | None = None
    if per_instance > 1:
        for ranks in topology.instances:
            group = dist.new_group(list(ranks))
            if topology.rank in ranks:
                mine_instance = group
    cross_ranks = tuple(sorted(ranks[topology.local_rank] for ranks in topology.instances))
    if len(topology.instances) > 1:
        for local_rank in range(per_instance):
            members = sorted(instance[local_rank] for instance in topology.instances)
            group = dist.new_group(members)
            if topology.rank in members:
                mine_cross = group
    return HierarchyGroups(
        rank=topology.rank,
        world_size=topology.world_size,
        instance_count=len(topology.instances),
        processes_per_instance=per_instance,
        instance_ranks=topology.instance_ranks,
        cross_ranks=cross_ranks,
        instance_group=mine_instance,
        cross_group=mine_cross,
    )
