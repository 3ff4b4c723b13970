"""Which processes share an instance, learnt from every process's RUNYARD_HOST.

Ranks are not assumed to be contiguous per instance: mpirun's ``--map-by`` options and a
torchrun-style launch number them differently, so the layout is gathered after init.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

# torch.distributed re-exports Store from its C extension without marking it exported,
# which strict mypy refuses; it is the same class.
from torch._C._distributed_c10d import Store

_HOST_KEY = "runyard/dataparallel/host/{rank}"


@dataclass(frozen=True)
class Topology:
    """The job's instances, each as its ascending global ranks, in order of their lowest
    rank (so the instance holding rank 0 comes first)."""

    rank: int
    instances: tuple[tuple[int, ...], ...]
    instance_hosts: tuple[str, ...]

    @classmethod
    def from_hosts(cls, hosts: list[str], rank: int) -> Topology:
        members: dict[str, list[int]] = {}
        for member_rank, host in enumerate(hosts):
            members.setdefault(host, []).append(member_rank)
        # dicts keep insertion order, and ranks were visited in ascending order.
        return cls(
            rank=rank,
            instances=tuple(tuple(ranks) for ranks in members.values()),
            instance_hosts=tuple(members),
        )

    @property
    def world_size(self) -> int:
        return sum(len(ranks) for ranks in self.instances)

    @property
    def instance_index(self) -> int:
        return next(i for i, ranks in enumerate(self.instances) if self.rank in ranks)

    @property
    def instance_ranks(self) -> tuple[int, ...]:
        return self.instances[self.instance_index]

    @property
    def local_rank(self) -> int:
        return self.instance_ranks.index(self.rank)

    @property
    def local_size(self) -> int:
        return len(self.instance_ranks)

    @property
    def processes_per_instance(self) -> int:
        """The same for every instance, or a ValueError naming the odd ones: the
        hierarchical reduction pairs the i-th process of every instance."""
        sizes = {len(ranks) for ranks in self.instances}
        if len(sizes) != 1:
            layout = ", ".join(
                f"{host}: {len(ranks)}"
                for host, ranks in zip(self.instance_hosts, self.instances, strict=True)
            )
            raise ValueError(
                "Runyard data parallel needs the same number of processes on every instance; "
                f"this job has {layout}"
            )
        return sizes.pop()


def publish_host(store: Store, rank: int, host: str) -> None:
    store.set(_HOST_KEY.format(rank=rank), host)


def read_hosts(store: Store, world_size: int) -> list[str]:
    """Blocks until every rank has published (bounded by the store's timeout). Not a
    collective: any subset of ranks may call it once all of them have published."""
    return [
        bytes(store.get(_HOST_KEY.format(rank=member))).decode() for member in range(world_size)
    ]


def gather_hosts(host: str) -> list[str]:
    """A collective on the default group, for a group initialised without Runyard."""
    hosts: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, host)
    return [str(member_host) for member_host in hosts]
