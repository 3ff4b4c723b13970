"""Where each rank of a model-parallel job stands: its pipeline stage and its replica.

A job of W processes runs ``pp`` pipeline stages (``partitions``) of ``dp = W / pp``
model replicas. ``placement_strategy`` lays them out, as SageMaker's library does:
``cluster`` puts a replica's stages on adjacent ranks (so on one instance, where the
stages exchange activations every microbatch); ``spread`` puts the replicas of one stage
on adjacent ranks. Sharded data parallelism (pp = 1) cuts the replicas into groups of
``sharded_data_parallel_degree`` adjacent ranks: each group holds one copy of the model
states, sharded across it, and the groups replicate one another (MiCS); adjacent ranks
share an instance, so the sharding's all-gathers stay inside one where they fit.

Tensor parallelism (``tensor_parallel_degree`` t > 1) groups the t ranks that hold one
stage of t adjacent replicas (adjacent ranks where there is one stage, so on one
instance, where they exchange activations in every layer; with ``cluster`` placement and
p stages, ranks p apart). As in SageMaker's library the data-parallel
group then holds every rank of a stage (t x the replicas), and the reduced data-parallel
group the ranks that hold the same shards (one per replica); the model-parallel group is
one replica's ranks, every stage's tensor-parallel group. Sharded together with tensor
parallelism, the shard groups are cut from the reduced data-parallel group: the ranks
form a (replicate, shard, tp) mesh, the tensor-parallel ranks innermost.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    world_size: int
    pp_size: int = 1
    shard_degree: int = 1
    placement: str = "cluster"
    tp_size: int = 1

    def __post_init__(self) -> None:
        if self.world_size % self.pp_size:
            raise ValueError(f"{self.pp_size} stages do not divide {self.world_size} processes")
        if self.dp_size % self.shard_degree:
            raise ValueError(f"shard groups of {self.shard_degree} do not divide {self.dp_size}")
        if self.dp_size % self.tp_size:
            raise ValueError(f"{self.tp_size} tensor-parallel ranks do not divide {self.dp_size}")
        if self.rdp_size % self.shard_degree:
            raise ValueError(f"shard groups of {self.shard_degree} do not divide {self.rdp_size}")

    @property
    def dp_size(self) -> int:
        return self.world_size // self.pp_size

    @property
    def replicate_size(self) -> int:
        """How many copies of the model states the replicas keep (sharded: one a group)."""
        return self.rdp_size // self.shard_degree

    @property
    def rdp_size(self) -> int:
        """How many replicas hold the same tensor-parallel shard."""
        return self.dp_size // self.tp_size

    def tp_rank(self, rank: int) -> int:
        return self.dp_rank(rank) % self.tp_size

    def rdp_rank(self, rank: int) -> int:
        return self.dp_rank(rank) // self.tp_size

    def tp_group(self, rdp_rank: int, pp_rank: int) -> list[int]:
        """The ranks that hold the shards of one replica's tensor-parallel modules (of
        stage ``pp_rank``)."""
        return [self.rank_of(pp_rank, rdp_rank * self.tp_size + tp) for tp in range(self.tp_size)]

    def rdp_group(self, tp_rank: int, pp_rank: int) -> list[int]:
        """The ranks that hold the same shard (of stage ``pp_rank``), one per replica."""
        return [
            self.rank_of(pp_rank, replica * self.tp_size + tp_rank)
            for replica in range(self.rdp_size)
        ]

    def mp_group(self, rdp_rank: int) -> list[int]:
        """The ranks that hold one replica of the model: every stage's tensor-parallel
        group, stage by stage (SageMaker's model-parallel group)."""
        return [rank for stage in range(self.pp_size) for rank in self.tp_group(rdp_rank, stage)]

    def mp_rank(self, rank: int) -> int:
        return self.pp_rank(rank) * self.tp_size + self.tp_rank(rank)

    def pp_rank(self, rank: int) -> int:
        if self.placement == "cluster":
            return rank % self.pp_size
        return rank // self.dp_size

    def dp_rank(self, rank: int) -> int:
        if self.placement == "cluster":
            return rank // self.pp_size
        return rank % self.dp_size

    def rank_of(self, pp_rank: int, dp_rank: int) -> int:
        if self.placement == "cluster":
            return dp_rank * self.pp_size + pp_rank
        return pp_rank * self.dp_size + dp_rank

    def pp_group(self, dp_rank: int) -> list[int]:
        """The ranks of one replica's stages, first stage first."""
        return [self.rank_of(stage, dp_rank) for stage in range(self.pp_size)]

    def dp_group(self, pp_rank: int) -> list[int]:
        """The ranks holding the same stage of every replica."""
        return [self.rank_of(pp_rank, replica) for replica in range(self.dp_size)]

    def shard_mesh(self, pp_rank: int = 0) -> list[list[int]]:
        """The replicas of a stage as rows of shard groups: (replicate, shard)."""
        ranks = self.dp_group(pp_rank)
        degree = self.shard_degree
        return [ranks[start : start + degree] for start in range(0, len(ranks), degree)]

    def sharded_tp_mesh(self) -> list[list[list[int]]]:
        """The ranks as (replicate, shard, tp): shard groups of the ranks that hold the
        same tensor-parallel shard, each rank beside its tensor-parallel peers."""
        groups = self.rdp_size // self.shard_degree
        return [
            [
                self.tp_group(group * self.shard_degree + shard, 0)
                for shard in range(self.shard_degree)
            ]
            for group in range(groups)
        ]
