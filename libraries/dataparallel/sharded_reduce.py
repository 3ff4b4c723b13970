"""The reduction itself: one fusion buffer averaged over every process, hierarchically and
sharded by instance.

With L processes on each of I instances, the buffer is split into L slabs and each slab
into I rows (as ``tensor_split`` splits; reduce-scatter needs them equal, so for it the
buffer is first padded to a multiple of L*I):

1. instance reduce: slab [l] is summed over the instance onto its local process l, so
   each process handles 1/L of the buffer from here on;
2. cross-instance reduce, between the l-th processes of every instance: row [l, s] is
   summed onto the one on instance s. The rows [:, s] are shard s, and instance s alone
   reduces them, as the server for that shard;
3. cross-instance share: each reduced row goes back from its owner to the other
   instances;
4. instance share: each slab goes back from its local owner to the instance.

Three ways to run it (``ShardExchange``):
- "reduce_scatter": reduce-scatter, then all-gather, at each level: NCCL's
  bandwidth-optimal rings, and the default for CUDA tensors.
- "reduce_to_owner": one ``reduce`` onto each owner, then one ``broadcast`` from it, all
  in place: the parameter-server pattern; every backend has both collectives.
- "allreduce": the default on CPU. No hierarchy: one ``all_reduce`` over every process,
  whose ring already reduces each shard on one process and gathers it back. On gloo
  every link of a machine's processes is the same loopback, so a hierarchy only adds
  hops, and gloo's allreduce is by far its fastest collective: measured on CPU
  (``bench/dataparallel_allreduce.py``, ``bench/dataparallel_step.py``), the two
  hierarchical exchanges reached 0.6-0.9x of it, and so 0.8-0.87x of torch DDP's step
  throughput; the single allreduce matches DDP. Reduce-to-owner through all-to-all and
  all-gather, which would let compressed shards be summed in float32, was slower still
  (0.56-0.78x).

Only steps 2 and 3 cross instances, so only they are compressed. The average is taken
before compressing (each process's slab divided by the world size), which keeps fp16 sums
of large gradients finite. The "allreduce" exchange compresses everything it sends; on
CPU through compressed_allreduce.py (gloo moves the half-precision bytes, torch sums them
in float32), on CUDA as one half-precision allreduce.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist

from libraries.dataparallel.compressed_allreduce import CompressedAverage
from libraries.dataparallel.groups import HierarchyGroups

Compression = Literal["fp16", "bf16"]
ShardExchange = Literal["reduce_to_owner", "reduce_scatter", "allreduce"]

COMPRESSED_DTYPES: dict[Compression, torch.dtype] = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
SHARD_EXCHANGES: tuple[ShardExchange, ...] = ("reduce_to_owner", "reduce_scatter", "allreduce")

# From this many float32 elements (1 MiB) up, a compressed CPU buffer is averaged point to
# point (CompressedAverage.average_, on the reduction thread) rather than through one
# all-gather started at once. Measured with bf16 on 2 cores, gloo, 2 and 4 processes, both
# paths timed on buffers of 64 KiB to 4 MiB: the all-gather is faster below 256 KiB (its
# one collective's latency), the point-to-point one from 1-2 MiB at 2 processes (1.3x at
# 2 MiB) and from 256 KiB-1 MiB at 4 (1.4x at 1 MiB, 2x at 2 MiB), as the all-gather's
# N-fold bytes and additions grow.
COMPRESSED_P2P_MIN_NUMEL = 2**18


def default_shard_exchange(device: torch.device) -> ShardExchange:
    """By where the gradients live: NCCL carries CUDA tensors, gloo the CPU's (whatever
    name the backend was registered under, smddp included)."""
    return "reduce_scatter" if device.type == "cuda" else "allreduce"


@dataclass(frozen=True)
class CollectiveRecord:
    """One stage the reduction ran, for tests and diagnostics."""

    # "<instance|cross>_<reduce_scatter|all_gather|reduce|broadcast>", "world_allreduce", or
    # "world_compressed_<all_gather|p2p>" (compressed_allreduce.py; ``dtype`` on the wire)
    stage: str
    group_ranks: tuple[int, ...]
    input_numel: int
    output_numel: int
    dtype: torch.dtype
    # In the cross-instance stages: the shard this process reduces (its instance's).
    owned_shard: int | None = None


CollectiveObserver = Callable[[CollectiveRecord], None]


@dataclass(frozen=True)
class _Level:
    name: str
    group: dist.ProcessGroup | None
    ranks: tuple[int, ...]
    position: int  # this process's rank in ``group``: the chunk it owns


class ShardedReducer:
    def __init__(
        self,
        groups: HierarchyGroups,
        *,
        compression: Compression | None = None,
        shard_exchange: ShardExchange = "reduce_to_owner",
        on_collective: CollectiveObserver | None = None,
    ) -> None:
        if compression is not None and compression not in COMPRESSED_DTYPES:
            raise ValueError(f"compression must be one of {sorted(COMPRESSED_DTYPES)} or None")
        if shard_exchange not in SHARD_EXCHANGES:
            raise ValueError(f"shard_exchange must be one of {list(SHARD_EXCHANGES)}")
        self.groups = groups
        self.compression = compression
        self.shard_exchange = shard_exchange
        self._on_collective = on_collective
        self._instance = _Level(
            "instance",
            groups.instance_group,
            groups.instance_ranks,
            groups.instance_ranks.index(groups.rank),
        )
        self._cross = _Level("cross", groups.cross_group, groups.cross_ranks, groups.owned_shard)
        self._world = _Level("world", None, tuple(range(groups.world_size)), groups.rank)
        self._compressed = (
            None
            if compression is None
            else CompressedAverage(COMPRESSED_DTYPES[compression], groups.rank, groups.world_size)
        )

    def starts_at_once(self, flat: torch.Tensor) -> bool:
        """Whether averaging ``flat`` is one collective, which the caller's thread may
        start itself (``average_async_``) and which keeps the order buffers came in."""
        return self.shard_exchange == "allreduce" and not self._averages_compressed(flat)

    def _averages_compressed(self, flat: torch.Tensor) -> bool:
        """Whether ``flat`` is averaged by CompressedAverage.average_."""
        return (
            self._compressed is not None
            and flat.device.type == "cpu"
            and flat.numel() >= COMPRESSED_P2P_MIN_NUMEL
        )

    def average_(self, flat: torch.Tensor) -> torch.Tensor:
        """Replaces the 1-D ``flat`` with its average over every process, in place."""
        groups = self.groups
        if groups.world_size == 1:
            return flat
        if self.shard_exchange == "allreduce":
            return self._allreduce(flat)
        per_instance, instances = groups.processes_per_instance, groups.instance_count
        padded = flat
        if self.shard_exchange == "reduce_scatter":
            parts = per_instance * instances
            padded = _padded(flat, math.ceil(flat.numel() / parts) * parts)

        slab = self._reduce(padded, self._instance) if per_instance > 1 else padded
        slab.div_(groups.world_size)
        if instances > 1:
            wire = slab
            if self.compression is not None:
                wire = slab.to(COMPRESSED_DTYPES[self.compression])
            self._share(wire, self._reduce(wire, self._cross), self._cross)
            if wire is not slab:
                slab.copy_(wire)
        if per_instance > 1:
            self._share(padded, slab, self._instance)

        if padded is not flat:
            flat.copy_(padded[: flat.numel()])
        return flat

    def _allreduce(self, flat: torch.Tensor) -> torch.Tensor:
        if self._compressed is not None and self._averages_compressed(flat):
            self._record(self._world, "compressed_p2p", flat, flat, dtype=self._compressed.dtype)
            return self._compressed.average_(flat)
        return self.average_async_(flat).wait()

    def average_async_(self, flat: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        """The "allreduce" exchange, started at once: one collective, so buckets issued in
        order from the caller's thread stay in order, and need no thread of their own."""
        if self._compressed is not None and flat.device.type == "cpu":
            wire_dtype = self._compressed.dtype
            self._record(self._world, "compressed_all_gather", flat, flat, dtype=wire_dtype)
            return self._compressed.gather_average_async_(flat)
        flat.div_(self.groups.world_size)
        wire = flat
        if self.compression is not None:
            wire = flat.to(COMPRESSED_DTYPES[self.compression])
        self._record(self._world, "allreduce", wire, wire)
        work = dist.all_reduce(wire, async_op=True)
        assert work is not None  # async_op=True always gives the work

        def finished(_: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            return flat.copy_(wire) if wire is not flat else flat

        done: torch.futures.Future[torch.Tensor] = work.get_future().then(finished)
        return done

    def _reduce(self, tensor: torch.Tensor, level: _Level) -> torch.Tensor:
        """Sums ``tensor`` over the level's group; returns this process's chunk of the
        sum. ``tensor`` is scratch afterwards (except that chunk, which may live in it)."""
        chunks = tensor.tensor_split(len(level.ranks))
        if self.shard_exchange == "reduce_scatter":
            owned = tensor.new_empty(chunks[0].numel())
            self._record(level, "reduce_scatter", tensor, owned)
            dist.reduce_scatter_single(owned, tensor, group=level.group)
            return owned
        self._record(level, "reduce", tensor, chunks[level.position])
        # All issued before the first wait, so the backend runs them side by side.
        # Every member splits alike, so all skip the same empty chunks.
        works = [
            dist.reduce(chunk, group=level.group, group_dst=owner, async_op=True)
            for owner, chunk in enumerate(chunks)
            if chunk.numel()
        ]
        for work in works:
            work.wait()
        return chunks[level.position]

    def _share(self, tensor: torch.Tensor, owned: torch.Tensor, level: _Level) -> None:
        """Fills ``tensor`` with every member's chunk; ``owned`` is this process's."""
        if self.shard_exchange == "reduce_scatter":
            self._record(level, "all_gather", owned, tensor)
            dist.all_gather_single(tensor, owned, group=level.group)
            return
        # reduce_to_owner left each owner's chunk in place inside ``tensor``.
        self._record(level, "broadcast", owned, tensor)
        works = [
            dist.broadcast(chunk, group=level.group, group_src=owner, async_op=True)
            for owner, chunk in enumerate(tensor.tensor_split(len(level.ranks)))
            if chunk.numel()
        ]
        for work in works:
            work.wait()

    def _record(
        self,
        level: _Level,
        collective: str,
        tensor: torch.Tensor,
        output: torch.Tensor,
        *,
        dtype: torch.dtype | None = None,
    ) -> None:
        if self._on_collective is not None:
            self._on_collective(
                CollectiveRecord(
                    stage=f"{level.name}_{collective}",
                    group_ranks=level.ranks,
                    input_numel=tensor.numel(),
                    output_numel=output.numel(),
                    dtype=dtype or tensor.dtype,
                    owned_shard=level.position if level is self._cross else None,
                )
            )


def _padded(flat: torch.Tensor, numel: int) -> torch.Tensor:
    if flat.numel() == numel:
        return flat
    padded = flat.new_zeros(numel)
    padded[: flat.numel()].copy_(flat)
    return padded
