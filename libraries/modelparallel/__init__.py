"""Runyard's model-parallel library, behind SageMaker's ``smdistributed.modelparallel.torch``
API (v1): a job with ``{"smdistributed": {"modelparallel": {"enabled": true, ...}},
"mpi": {"enabled": true, ...}}`` runs its script under mpirun, and ``import
smdistributed.modelparallel.torch as smp`` there is this package.

Built on PyTorch's own parts: torch.distributed.pipelining for pipeline stages
(``pipeline``, ``splits``), DistributedDataParallel for replicas, FSDP2's
``fully_shard`` on a 2-D device mesh for sharded data parallelism (MiCS), composable
activation checkpointing, DTensor's ``parallelize_module`` for tensor parallelism
(``tensor``), autocast and FSDP's mixed precision for bf16/fp16, and
torch.distributed.checkpoint for sharded checkpoints.
"""

from __future__ import annotations

from typing import Any

from libraries.modelparallel import amp
from libraries.modelparallel.checkpoints import (
    full_state_dict,
    load,
    resume_from_checkpoint,
    save,
    save_checkpoint,
)
from libraries.modelparallel.comm import (
    DP_GROUP,
    MP_GROUP,
    PP_GROUP,
    RDP_GROUP,
    TP_GROUP,
    WORLD,
    CommGroup,
    RankType,
    barrier,
    broadcast,
    dp_barrier,
    dp_rank,
    dp_size,
    get_dp_group,
    get_dp_process_group,
    get_mp_group,
    get_mp_process_group,
    get_pp_group,
    get_pp_process_group,
    get_rdp_group,
    get_rdp_process_group,
    get_tp_group,
    get_tp_process_group,
    get_world_group,
    get_world_process_group,
    local_rank,
    local_size,
    mp_barrier,
    mp_rank,
    mp_size,
    pp_barrier,
    pp_rank,
    pp_size,
    rank,
    rdp_rank,
    rdp_size,
    recv_from,
    send,
    size,
    tp_rank,
    tp_size,
)
from libraries.modelparallel.delayed import delay_param_initialization, model_creation
from libraries.modelparallel.marks import (
    partition,
    set_activation_checkpointing,
    set_partition,
    set_tensor_parallelism,
    tensor_parallelism,
)
from libraries.modelparallel.model import DistributedModel
from libraries.modelparallel.optimizer import DistributedOptimizer
from libraries.modelparallel.state import ConfigError, is_initialized
from libraries.modelparallel.state import init as _init
from libraries.modelparallel.step import StepOutput, step

# The release of SageMaker's library whose API (v1) this one offers, as
# ``smdistributed.modelparallel.__version__`` says it to scripts.
SAGEMAKER_VERSION = "1.15.0"


def init(config: dict[str, Any] | None = None) -> None:
    """Starts the library with the job's parameters, and ``config``'s for those the job
    leaves out (as SageMaker's does: the estimator's ``distribution`` wins)."""
    _init(config)


__all__ = [
    "DP_GROUP",
    "MP_GROUP",
    "PP_GROUP",
    "RDP_GROUP",
    "TP_GROUP",
    "WORLD",
    "CommGroup",
    "ConfigError",
    "DistributedModel",
    "DistributedOptimizer",
    "RankType",
    "StepOutput",
    "amp",
    "barrier",
    "broadcast",
    "delay_param_initialization",
    "dp_barrier",
    "dp_rank",
    "dp_size",
    "full_state_dict",
    "get_dp_group",
    "get_dp_process_group",
    "get_mp_group",
    "get_mp_process_group",
    "get_pp_group",
    "get_pp_process_group",
    "get_rdp_group",
    "get_rdp_process_group",
    "get_tp_group",
    "get_tp_process_group",
    "get_world_group",
    "get_world_process_group",
    "init",
    "is_initialized",
    "load",
    "local_rank",
    "local_size",
    "model_creation",
    "mp_barrier",
    "mp_rank",
    "mp_size",
    "partition",
    "pp_barrier",
    "pp_rank",
    "pp_size",
    "rank",
    "rdp_rank",
    "rdp_size",
    "recv_from",
    "resume_from_checkpoint",
    "save",
    "save_checkpoint",
    "send",
    "set_activation_checkpointing",
    "set_partition",
    "set_tensor_parallelism",
    "size",
    "step",
    "tensor_parallelism",
    "tp_rank",
    "tp_size",
]
