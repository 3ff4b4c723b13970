"""Horovod's PyTorch API on Runyard's data-parallel library and torch.distributed.

Jobs under the ``mpi`` distribution import it as ``horovod.torch`` (the launcher puts
``libraries/horovod/compat`` on their PYTHONPATH), so Horovod scripts run unchanged:

    import horovod.torch as hvd

    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

What Horovod has and this does not is refused by name (refusals.py), never skipped.
"""

from __future__ import annotations

from libraries.horovod.broadcasts import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from libraries.horovod.capabilities import (
    ccl_built,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rocm_built,
)
from libraries.horovod.collectives import (
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allreduce,
    grouped_allreduce_,
)
from libraries.horovod.compression import Compression, Compressor, FP16Compressor, NoneCompressor
from libraries.horovod.handles import Handle, poll, synchronize
from libraries.horovod.ops import Adasum, Average, Max, Min, Product, ReduceOp, Sum
from libraries.horovod.optimizer import DistributedOptimizer
from libraries.horovod.process_sets import global_process_set
from libraries.horovod.refusals import NotOfferedError
from libraries.horovod.state import (
    cross_rank,
    cross_size,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)

__all__ = [
    "Adasum",
    "Average",
    "Compression",
    "Compressor",
    "DistributedOptimizer",
    "FP16Compressor",
    "Handle",
    "Max",
    "Min",
    "NoneCompressor",
    "NotOfferedError",
    "Product",
    "ReduceOp",
    "Sum",
    "allgather",
    "allgather_async",
    "allgather_object",
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "barrier",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "broadcast_object",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "ccl_built",
    "cross_rank",
    "cross_size",
    "cuda_built",
    "ddl_built",
    "global_process_set",
    "gloo_built",
    "gloo_enabled",
    "grouped_allreduce",
    "grouped_allreduce_",
    "init",
    "is_homogeneous",
    "is_initialized",
    "local_rank",
    "local_size",
    "mpi_built",
    "mpi_enabled",
    "mpi_threads_supported",
    "nccl_built",
    "poll",
    "rank",
    "rocm_built",
    "shutdown",
    "size",
    "synchronize",
]
