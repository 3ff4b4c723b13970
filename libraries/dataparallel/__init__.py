"""Runyard data parallel: SageMaker's data-parallel design on torch.distributed.

Gradients fill fusion buffers (DDP buckets, ``bucket_cap_mb``, 25 MB by default); each
full buffer is split into one shard per instance, instance i reduces shard i, and the
result is gathered back to every process. Processes on one instance reduce among
themselves first, only the cross-instance traffic is optionally fp16/bf16, and it all
overlaps the backward pass. Transport: gloo on CPU, NCCL on CUDA.

    from libraries import dataparallel as dp

    dp.init_process_group()            # RANK/WORLD_SIZE or OMPI_COMM_WORLD_*, MASTER_*
    model = dp.DistributedDataParallel(model, compression="bf16")

Once initialised, torch.distributed's own collectives work on the same default group.
"""

from __future__ import annotations

from torch.distributed import (
    ReduceOp,
    all_gather,
    all_reduce,
    all_to_all_single,
    broadcast,
    group,
    reduce,
)

from libraries.dataparallel.ddp import DEFAULT_BUCKET_CAP_MB, DistributedDataParallel
from libraries.dataparallel.placement import Placement, PlacementError
from libraries.dataparallel.process_group import (
    NotInitializedError,
    barrier,
    default_backend,
    destroy_process_group,
    get_local_rank,
    get_local_size,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_initialized,
)
from libraries.dataparallel.sharded_reduce import CollectiveRecord, Compression, ShardExchange

__all__ = [
    "DEFAULT_BUCKET_CAP_MB",
    "CollectiveRecord",
    "Compression",
    "DistributedDataParallel",
    "NotInitializedError",
    "Placement",
    "PlacementError",
    "ReduceOp",
    "ShardExchange",
    "all_gather",
    "all_reduce",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "default_backend",
    "destroy_process_group",
    "get_local_rank",
    "get_local_size",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "is_available",
    "is_initialized",
    "reduce",
]
