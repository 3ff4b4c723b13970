"""The ``smddp`` process-group backend name, as SageMaker's library registers it, so that
``torch.distributed.init_process_group(backend="smddp")`` works in job processes.

It is torch's own gloo (CPU) or NCCL (CUDA) under another name; the hierarchical, sharded
reduction comes with Runyard's DistributedDataParallel, which runs on any group.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from libraries.dataparallel.cuda_pinning import allow_cuda_pinning_without_cuda
from libraries.dataparallel.process_group import open_session_in_group_construction

SMDDP_BACKEND = "smddp"


def register_smddp_backend() -> None:
    """Idempotent: the backend may be reached through more than one import path."""
    if SMDDP_BACKEND in dist.Backend.backend_list:
        return
    # torch asks the creator for one backend per device type it is registered for, and
    # does not say which device it is asking for; so the name stands for exactly one
    # device type: CUDA where there is one (as SageMaker's smddp), else the CPU.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dist.Backend.register_backend(
        SMDDP_BACKEND, _create_backend, extended_api=True, devices=[device]
    )


def _create_backend(options: Any, backend_options: Any) -> Any:
    """``options`` is torch's _DistributedBackendOptions (store, group_rank, group_size,
    timeout, group_id, global_ranks_in_group); ``backend_options`` what the caller passed
    as ``pg_options``, usually None."""
    if not dist.is_initialized():
        # Only the default group is created before init completes.
        open_session_in_group_construction(options.store, options.group_rank, options.group_size)
    if torch.cuda.is_available():
        return _nccl(options, backend_options)
    allow_cuda_pinning_without_cuda()
    backend = dist.ProcessGroupGloo(
        options.store, options.group_rank, options.group_size, timeout=options.timeout
    )
    backend.options.global_ranks_in_group = options.global_ranks_in_group
    backend.options.group_name = options.group_id
    return backend


def _nccl(options: Any, backend_options: Any) -> Any:
    # Not importable from a CPU-only build of torch: only reached where CUDA exists.
    from torch.distributed import ProcessGroupNCCL

    nccl_options = backend_options or ProcessGroupNCCL.Options()
    nccl_options._timeout = options.timeout
    nccl_options.global_ranks_in_group = options.global_ranks_in_group
    nccl_options.group_name = options.group_id
    return ProcessGroupNCCL(options.store, options.group_rank, options.group_size, nccl_options)
