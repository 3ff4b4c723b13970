"""``smdistributed.dataparallel.torch.distributed``: SageMaker's process-group API
(v1.3 and before), on Runyard's library and torch.distributed's default group."""

from runtime.dataparallel import (
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
