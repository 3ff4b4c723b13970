"""parameter_server jobs: parameter servers beside the workers, as the framework expects.

TensorFlow, as SageMaker's TensorFlow container does it: with two or more instances,
TF_CONFIG for the script and a ``ps`` task on every instance
(``runtime.launch.tensorflow_ps``) that serves until the script is done and, on the
instances after the first, until the master's task is done too
(``runtime.launch.tensorflow_master``); with one instance, the script alone, without
TF_CONFIG. PyTorch: one Runyard parameter server per instance (RPC ranks 0..S-1, in
host order), then the workers (ranks S.., host by host), as ``libraries.parameter_server``
expects. The servers and the waits are Runyard's helpers: they run without the job's
variables, which are the script's alone.
"""

from __future__ import annotations

from contract import variables
from runtime.launch import tf_config
from runtime.launch.context import LaunchContext
from runtime.launch.workers import Launch, WorkerSpec

# Runyard's parameter server for PyTorch, a library the launcher starts by name only.
SERVER_MODULE = "libraries.parameter_server"


def plan(context: LaunchContext) -> Launch:
    if context.config.spec.framework == "tensorflow":
        return Launch(_tensorflow(context))
    return Launch(_pytorch(context, workers_per_host=max(context.gpus, 1)))


def _tensorflow(context: LaunchContext) -> list[WorkerSpec]:
    config, code, python = context.config, context.code, context.python.python
    if len(config.hosts) == 1:
        return [WorkerSpec(context.entry, context.script_env, code)]
    ps_env = tf_config.environment(context.env, tf_config.parameter_server(config, ps_task=True))
    script_config = tf_config.parameter_server(config, ps_task=False)
    script_env = tf_config.environment(context.script_env, script_config)
    specs = [
        WorkerSpec([python, "-m", "runtime.launch.tensorflow_ps"], ps_env, code, auxiliary=True),
        WorkerSpec(context.entry, script_env, code),
    ]
    if not config.is_master:
        [master] = script_config["cluster"]["master"]
        wait = [python, "-m", "runtime.launch.tensorflow_master", master]
        specs.append(WorkerSpec(wait, context.env, code, afterwards=True))
    return specs


def _pytorch(context: LaunchContext, workers_per_host: int) -> list[WorkerSpec]:
    config, env = context.config, context.env
    servers = len(config.hosts)
    group = {
        "MASTER_ADDR": config.master_addr,
        "MASTER_PORT": str(config.master_port),
        variables.PS_NUM_SERVERS: str(servers),
        variables.PS_WORLD_SIZE: str(servers * (1 + workers_per_host)),
    }
    # The server only applies optimizer steps: one thread leaves the CPUs to the workers,
    # which, several to an instance, also get one each (as under torchrun).
    server_env = {
        **env,
        **group,
        variables.PS_ROLE: "server",
        variables.PS_RANK: str(config.node_rank),
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
    }
    common = {**context.script_env, **group}
    if workers_per_host > 1:
        common.setdefault("OMP_NUM_THREADS", "1")
    specs = [WorkerSpec([context.python.python, "-m", SERVER_MODULE], server_env, context.code)]
    for local_rank in range(workers_per_host):
        rank = servers + config.node_rank * workers_per_host + local_rank
        worker_env = {
            **common,
            variables.PS_ROLE: "worker",
            variables.PS_RANK: str(rank),
            "LOCAL_RANK": str(local_rank),
        }
        specs.append(WorkerSpec(context.entry, worker_env, context.code))
    return specs
