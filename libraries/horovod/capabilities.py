"""What Horovod's build-information calls answer here: collectives run on torch's gloo
(CPU tensors) and NCCL (CUDA tensors, where torch has them); MPI starts the processes
but carries no data."""

from __future__ import annotations

import torch
import torch.distributed as dist


def mpi_built() -> bool:
    return False


def mpi_enabled() -> bool:
    return False


def mpi_threads_supported() -> bool:
    return False


def gloo_built() -> bool:
    return dist.is_gloo_available()


def gloo_enabled() -> bool:
    return dist.is_gloo_available()


def nccl_built() -> bool:
    return dist.is_nccl_available() and torch.cuda.is_available()


def cuda_built() -> bool:
    return torch.version.cuda is not None


def rocm_built() -> bool:
    return torch.version.hip is not None


def ccl_built() -> bool:
    return False


def ddl_built() -> bool:
    return False
