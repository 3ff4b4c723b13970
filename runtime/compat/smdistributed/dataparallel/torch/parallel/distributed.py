"""``smdistributed.dataparallel.torch.parallel.distributed``, as SageMaker's announcement
imports it: the process-group API and DistributedDataParallel in one module."""

from runtime.dataparallel import (
    DistributedDataParallel,
    ReduceOp,
    all_gather,
    all_reduce,
    all_to_all_single,
    barrier,
    broadcast,
    get_local_rank,
    get_local_size,
    get_rank,
    get_world_size,
    group,
    is_available,
    is_initialized,
    reduce,
)
from runtime.dataparallel.sagemaker import init_process_group

__all__ = [
    "DistributedDataParallel",
    "ReduceOp",
    "all_gather",
    "all_reduce",
    "all_to_all_single",
    "barrier",
    "broadcast",
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
