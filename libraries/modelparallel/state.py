"""The library's one state per process, made by ``init``: the job's parameters, where this
rank stands, its process groups, and the model and optimizer the script wrapped."""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from contract import modelparallel, variables
from contract.problems import Problem
from libraries.dataparallel import process_group
from libraries.modelparallel.topology import Topology
from libraries.modelparallel.wrapped import WrappedModel, WrappedOptimizer

# Where the job puts its parameters for the script, as SageMaker's SDK does.
PARAMETERS_VARIABLE = variables.sm_hp(modelparallel.HYPERPARAMETER)


class ConfigError(ValueError):
    """The parameters given to ``init`` cannot run on this job's processes."""


@dataclass
class State:
    parameters: modelparallel.Parameters
    topology: Topology
    rank: int
    local_rank: int
    local_size: int
    device: torch.device
    pp_group: dist.ProcessGroup
    # The pipeline schedule's sends and receives, in a group of their own: a collective
    # on the same group while a send is in flight would read the send's bytes.
    stage_group: dist.ProcessGroup
    dp_group: dist.ProcessGroup
    # A replica's ranks: its stages' tensor-parallel groups (or its stages, or its group).
    mp_group: dist.ProcessGroup
    # Tensor parallelism: the ranks sharing one replica's shards, and those holding the
    # same shard (the data-parallel group where there is none).
    tp_group: dist.ProcessGroup | None
    rdp_group: dist.ProcessGroup
    tp_mesh: DeviceMesh | None
    # Sharded data parallel: (replicate, shard); None where the states are not sharded.
    mesh: DeviceMesh | None
    # This rank alone, as the tensor-parallel group where there is no tensor parallelism
    # (``smp.get_tp_process_group()``): made when first asked for.
    alone: dist.ProcessGroup | None = None
    # The script's ``smp.DistributedModel`` and ``smp.DistributedOptimizer``.
    model: WrappedModel | None = None
    optimizer: WrappedOptimizer | None = None
    # Modules the script put on a stage (``smp.partition``, ``set_partition``).
    partitions: dict[int, int] = field(default_factory=dict)
    # Modules the script marked for tensor parallelism (``smp.tensor_parallelism``,
    # ``set_tensor_parallelism``), by id: True to distribute, False to keep whole.
    tensor_parallel: dict[int, bool] = field(default_factory=dict)
    # Modules the script asked to checkpoint activations of.
    checkpointed: list[torch.nn.Module] = field(default_factory=list)
    said: set[str] = field(default_factory=set)

    @property
    def pp_rank(self) -> int:
        return self.topology.pp_rank(self.rank)

    @property
    def dp_rank(self) -> int:
        return self.topology.dp_rank(self.rank)

    @property
    def tp_rank(self) -> int:
        return self.topology.tp_rank(self.rank)

    @property
    def rdp_rank(self) -> int:
        return self.topology.rdp_rank(self.rank)

    def say_once(self, message: str) -> None:
        """A note for the job's logs, from the first rank only, once."""
        if message not in self.said:
            self.said.add(message)
            if self.rank == 0:
                print(f"[smp] {message}", file=sys.stderr, flush=True)


_state: State | None = None


def current() -> State:
    if _state is None:
        raise RuntimeError("smp.init() has not been called in this process")
    return _state


def is_initialized() -> bool:
    return _state is not None


def job_parameters(env: Mapping[str, str]) -> dict[str, Any]:
    raw = env.get(PARAMETERS_VARIABLE)
    if not raw:
        return {}
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


def init(config: Mapping[str, Any] | None = None) -> State:
    """Joins the job's processes and makes their groups; the parameters are the job's,
    with ``config``'s where the job leaves one out. A second call returns the first
    call's state."""
    global _state
    if _state is not None:
        return _state
    raw = modelparallel.under(job_parameters(os.environ), config or {})
    process_group.init_process_group()
    world_size = dist.get_world_size()
    problems = modelparallel.problems(raw, world_size, ("parameters",))
    if problems:
        raise ConfigError("; ".join(_describe(problem) for problem in problems))
    parameters = modelparallel.parse(raw)
    topology = Topology(
        world_size,
        pp_size=parameters.partitions,
        shard_degree=parameters.sharded_data_parallel_degree,
        placement=parameters.placement_strategy,
        tp_size=parameters.tensor_parallel_degree,
    )
    # Pipeline schedules may leave sends in flight when the script returns: taking the
    # groups down before the interpreter ends lets their threads end first.
    atexit.register(_take_down)
    rank = dist.get_rank()
    local_rank = process_group.get_local_rank()
    device = _device(local_rank)
    dp_group = _own_group([topology.dp_group(p) for p in range(topology.pp_size)], rank)
    tp_group, rdp_group, tp_mesh = None, dp_group, None
    mesh = _shard_mesh(topology, device, rank)
    if topology.tp_size > 1:
        stages = range(topology.pp_size)
        tp_groups = [topology.tp_group(r, p) for p in stages for r in range(topology.rdp_size)]
        tp_group = _own_group(tp_groups, rank)
        rdp_groups = [topology.rdp_group(t, p) for p in stages for t in range(topology.tp_size)]
        rdp_group = _own_group(rdp_groups, rank)
        tp_mesh = DeviceMesh.from_group(tp_group, device.type, mesh_dim_names=("tp",))
        if topology.shard_degree > 1:
            # FSDP shards tensor-parallel parameters only over a mesh of the same root.
            world = DeviceMesh(
                device.type,
                torch.tensor(topology.sharded_tp_mesh()),
                mesh_dim_names=("replicate", "shard", "tp"),
            )
            tp_mesh, mesh = world["tp"], world["replicate", "shard"]
    pp_group = _own_group([topology.pp_group(d) for d in range(topology.dp_size)], rank)
    mp_group = pp_group if tp_group is None else tp_group
    if topology.tp_size > 1 and topology.pp_size > 1:
        mp_group = _own_group([topology.mp_group(r) for r in range(topology.rdp_size)], rank)
    _state = State(
        parameters=parameters,
        topology=topology,
        rank=rank,
        local_rank=local_rank,
        local_size=process_group.get_local_size(),
        device=device,
        pp_group=pp_group,
        mp_group=mp_group,
        stage_group=_own_group([topology.pp_group(d) for d in range(topology.dp_size)], rank),
        dp_group=dp_group,
        tp_group=tp_group,
        rdp_group=rdp_group,
        tp_mesh=tp_mesh,
        mesh=mesh,
    )
    return _state


def _describe(problem: Problem) -> str:
    return f"{'.'.join(str(part) for part in problem.loc)}: {problem.message}"


def _device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _own_group(groups: list[list[int]], rank: int) -> dist.ProcessGroup:
    """Every process makes every group, in one order (torch asks that), and keeps its own."""
    own = None
    for ranks in groups:
        group: dist.ProcessGroup = dist.new_group(ranks)
        if rank in ranks:
            own = group
    assert own is not None
    return own


def _shard_mesh(topology: Topology, device: torch.device, rank: int) -> DeviceMesh | None:
    if topology.shard_degree == 1 or topology.tp_size > 1:
        return None
    return DeviceMesh(
        device.type,
        torch.tensor(topology.shard_mesh(topology.pp_rank(rank))),
        mesh_dim_names=("replicate", "shard"),
    )


def _take_down() -> None:
    """Ends the library's part in the job once every rank is done with it: the groups'
    threads must end before the interpreter does, and they cannot while the model and
    optimizer the state holds still reference their groups, nor while a peer is still
    sending (gloo then aborts the process: "terminate called without an active
    exception")."""
    global _state
    if not process_group.every_rank_at_the_end():
        return
    _state = None
    gc.collect()
    dist.destroy_process_group()


def reset() -> None:
    """Forgets the state (tests run several jobs' worth in one process)."""
    global _state
    _state = None
