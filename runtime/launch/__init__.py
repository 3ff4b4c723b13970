"""Launchers: which processes an instance starts for each distribution mode.

(none)                          the entry point, once per instance
torch_distributed               torchrun-style: nproc_per_node ranked processes
mpi, pytorchddp,                mpirun on the first instance starts every rank; the
smdistributed.dataparallel      others wait for its daemon
parameter_server                TensorFlow: TF_CONFIG and a ps task per instance;
                                PyTorch: a Runyard parameter server per instance
                                and the script as its workers
multi_worker_mirrored_strategy  TF_CONFIG, the entry point once per instance
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from runtime.config import InstanceConfig
from runtime.launch import mpi, tf_config, torch_distributed
from runtime.launch.workers import WorkerSpec

# Distribution modes this runtime can launch; anything else is refused at submission.
SUPPORTED_DISTRIBUTIONS = frozenset(
    {
        "torch_distributed",
        "mpi",
        "pytorchddp",
        "parameter_server",
        "multi_worker_mirrored_strategy",
        "smdistributed.dataparallel",
    }
)
# Modes started by Open MPI's mpirun on the first instance; the others wait for it.
MPI_MODES = frozenset({"mpi", "pytorchddp", "smdistributed.dataparallel"})
# Put on PYTHONPATH for jobs of the data-parallel mode only: `import smdistributed...`
# is then Runyard's library, and nowhere else does that name exist.
COMPAT_DIR = Path(__file__).resolve().parents[1] / "compat"


@dataclass(frozen=True)
class Launch:
    specs: list[WorkerSpec] = field(default_factory=list)
    # An instance of an MPI job other than the first: mpirun starts its ranks.
    waits_for_mpi: bool = False


def plan(config: InstanceConfig, entry: list[str], env: dict[str, str], *, num_gpus: int) -> Launch:
    mode = config.mode
    code = config.paths.code
    if mode == "torch_distributed":
        return Launch(torch_distributed.worker_specs(config, entry, env, max(num_gpus, 1)))
    if mode in MPI_MODES:
        return _mpi(config, mode, entry, env, num_gpus)
    if mode == "parameter_server" and config.framework == "tensorflow":
        ps_env = {**env, "TF_CONFIG": json.dumps(tf_config.parameter_server(config, ps_task=True))}
        script_env = {
            **env,
            "TF_CONFIG": json.dumps(tf_config.parameter_server(config, ps_task=False)),
        }
        ps = WorkerSpec(
            [sys.executable, "-m", "runtime.launch.tensorflow_ps"], ps_env, code, auxiliary=True
        )
        return Launch([ps, WorkerSpec(entry, script_env, code)])
    if mode == "parameter_server":
        return Launch(_pytorch_parameter_server(config, entry, env, max(num_gpus, 1)))
    if mode == "multi_worker_mirrored_strategy":
        tf_env = {**env, "TF_CONFIG": json.dumps(tf_config.multi_worker_mirrored(config))}
        return Launch([WorkerSpec(entry, tf_env, code)])
    return Launch([WorkerSpec(entry, env, code)])


def _mpi(
    config: InstanceConfig, mode: str, entry: list[str], env: dict[str, str], num_gpus: int
) -> Launch:
    if not config.is_master:
        return Launch(waits_for_mpi=True)
    # Forwarded to every rank, for scripts that rendezvous with env:// (pytorchddp).
    env = {**env, "MASTER_ADDR": config.master_addr, "MASTER_PORT": str(config.master_port)}
    if mode == "smdistributed.dataparallel":
        env = {**env, "PYTHONPATH": _prepend(str(COMPAT_DIR), env.get("PYTHONPATH"))}
    options = config.distribution_section(mode).get("custom_mpi_options", "")
    argv = mpi.mpirun_command(
        config,
        entry,
        env,
        per_host=mpi.processes_per_host(config, mode, num_gpus),
        custom_options=shlex.split(options),
    )
    return Launch([WorkerSpec(argv, env, config.paths.code)])


def _pytorch_parameter_server(
    config: InstanceConfig, entry: list[str], env: dict[str, str], workers_per_host: int
) -> list[WorkerSpec]:
    """One server per instance (RPC ranks 0..S-1, in host order), then the workers (ranks
    S.., host by host), as runtime.parameter_server expects."""
    servers = len(config.hosts)
    common = {
        **env,
        "MASTER_ADDR": config.master_addr,
        "MASTER_PORT": str(config.master_port),
        "RUNYARD_PS_NUM_SERVERS": str(servers),
        "RUNYARD_PS_WORLD_SIZE": str(servers * (1 + workers_per_host)),
    }
    # The server only applies optimizer steps: one thread leaves the CPUs to the workers,
    # which, several to an instance, also get one each (as under torchrun).
    server_env = {
        **common,
        "RUNYARD_PS_ROLE": "server",
        "RUNYARD_PS_RANK": str(config.node_rank),
        "OMP_NUM_THREADS": common.get("OMP_NUM_THREADS", "1"),
    }
    if workers_per_host > 1:
        common.setdefault("OMP_NUM_THREADS", "1")
    specs = [
        WorkerSpec(
            [sys.executable, "-m", "runtime.parameter_server"], server_env, config.paths.code
        )
    ]
    for local_rank in range(workers_per_host):
        rank = servers + config.node_rank * workers_per_host + local_rank
        worker_env = {
            **common,
            "RUNYARD_PS_ROLE": "worker",
            "RUNYARD_PS_RANK": str(rank),
            "LOCAL_RANK": str(local_rank),
        }
        specs.append(WorkerSpec(entry, worker_env, config.paths.code))
    return specs


def _prepend(path: str, existing: str | None) -> str:
    return path if not existing else f"{path}:{existing}"
