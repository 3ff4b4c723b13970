"""Launchers: which processes an instance starts for its job's distribution mode.

Each mode's record (``contract.modes``) names its launcher; each launcher is one module:

script            (no mode) the entry point, once per instance
torchrun          torch_distributed: nproc_per_node ranked processes (``torch_distributed``)
mpirun            mpi, pytorchddp, smdistributed.dataparallel: mpirun on the first
                  instance starts every rank; the others wait for its daemon (``mpi``)
parameter_server  TensorFlow: TF_CONFIG and a ps task per instance; PyTorch: a Runyard
                  parameter server per instance and the script as its workers
                  (``parameter_servers``)
tf_multi_worker   multi_worker_mirrored_strategy: TF_CONFIG, the entry point once per
                  instance (``tf_config``)

Each plans from one ``LaunchContext``, which holds two environments: the one its own
processes run with (mpirun, Runyard's helpers), without the job's variables, and the
script's, with them: a job's variables reach its script and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

from contract.instance_config import InstanceConfig
from contract.modes import Launcher
from runtime.instance.layers import PythonEnvironment
from runtime.launch import mpi, parameter_servers, tf_config, torch_distributed
from runtime.launch.context import LaunchContext
from runtime.launch.workers import Launch, WorkerSpec

Plan = Callable[[LaunchContext], Launch]


def _script(context: LaunchContext) -> Launch:
    return Launch([WorkerSpec(context.entry, context.script_env, context.code)])


LAUNCHERS: dict[Launcher, Plan] = {
    Launcher.SCRIPT: _script,
    Launcher.TORCHRUN: torch_distributed.plan,
    Launcher.MPIRUN: mpi.plan,
    Launcher.PARAMETER_SERVER: parameter_servers.plan,
    Launcher.TF_MULTI_WORKER: tf_config.plan_multi_worker,
}


def plan(
    config: InstanceConfig,
    entry: list[str],
    env: dict[str, str],
    *,
    script_env: dict[str, str] | None = None,
    num_gpus: int,
    python: PythonEnvironment | None = None,
) -> Launch:
    """The processes to start. ``env``: what the launcher's own processes run with;
    ``script_env``: what the script runs with, the job's variables included (by default
    ``env``, for a job that sets none); ``python``: the job's Python environment (by
    default the runtime's own), whose interpreter runs Runyard's helper processes too."""
    mode = config.mode
    # A mode this runtime has no launcher for is refused at submission; run the script.
    launcher = mode.launcher if mode is not None and mode.launcher else Launcher.SCRIPT
    context = LaunchContext(
        config=config,
        mode=mode,
        entry=entry,
        env=env,
        script_env=env if script_env is None else script_env,
        gpus=num_gpus,
        python=python or PythonEnvironment.current(),
    )
    return LAUNCHERS[launcher](context)
