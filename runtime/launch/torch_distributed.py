"""A torchrun equivalent: ``nproc_per_node`` processes per instance, ranked across hosts.

Each instance starts its own processes with the env:// rendezvous variables pointing at
algo-1, which is all ``torch.distributed.init_process_group()`` needs. The runtime is the
agent that starts them: every process it starts runs the script, with the job's variables.
"""

from __future__ import annotations

from contract.instance_config import InstanceConfig
from runtime.launch.context import LaunchContext
from runtime.launch.workers import Launch, WorkerSpec


def plan(context: LaunchContext) -> Launch:
    nproc_per_node = max(context.gpus, 1)
    return Launch(worker_specs(context.config, context.entry, context.script_env, nproc_per_node))


def worker_specs(
    config: InstanceConfig, command: list[str], env: dict[str, str], nproc_per_node: int
) -> list[WorkerSpec]:
    nnodes = len(config.hosts)
    world_size = nnodes * nproc_per_node
    specs = []
    for local_rank in range(nproc_per_node):
        rank = config.node_rank * nproc_per_node + local_rank
        worker_env = {
            **env,
            "MASTER_ADDR": config.master_addr,
            "MASTER_PORT": str(config.master_port),
            "WORLD_SIZE": str(world_size),
            "RANK": str(rank),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(nproc_per_node),
            "GROUP_RANK": str(config.node_rank),
            "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(world_size),
        }
        if nproc_per_node > 1:
            # As torchrun does: several processes sharing a host should not each spawn
            # one OpenMP thread per core.
            worker_env.setdefault("OMP_NUM_THREADS", "1")
        specs.append(WorkerSpec(command, worker_env, config.paths.code))
    return specs
