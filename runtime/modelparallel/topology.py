"""Where each rank of a model-parallel job stands: its pipeline stage and its replica.

A job of W processes runs ``pp`` pipeline stages (``partitions``) of ``dp = W / pp``
model replicas. ``placement_strategy`` lays them out, as SageMaker's library does:
``cluster`` puts a replica's stages on adjacent ranks (so on one instance, where the
stages exchange activations every microbatch); ``spread`` puts the replicas of one stage
on adjacent ranks. Sharded data parallelism (pp = 1) cuts the replicas into groups of
``sharded_data_parallel_degree`` adjacent ranks: each group holds one copy of the model
states, sharded across it, and the groups replicate one another (MiCS); adjacent ranks
share an instance, so the sharding's all-gathers stay inside one where they fit.

Tensor parallelism is not run (refused at submission), so the model-parallel group is
the pipeline group and the reduced data-parallel group is the data-parallel group.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    world_size: int
    pp_size: int = 1
    shard_degree: int = 1
    placement: str = "cluster"

    def __post_init__(self) -> None:
        if self.world_size % self.pp_size:
            raise ValueError(f"{self.pp_size} stages do not divide {self.world_size} processes")
        if self.dp_size % self.shard_degree:
            raise ValueError(f"shard groups of {self.shard_degree} do not divide {self.dp_size}")

    @property
    def dp_size(self) -> int:
        return self.world_size // self.pp_size

    @property
    def replicate_size(self) -> int:
        """How many copies of the model states the replicas keep (sharded: one a group)."""
        return self.dp_size // self.shard_degree

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
