"""The environment a user script sees: SageMaker's SM_* contract plus Runyard's own.

Non-string values are JSON-encoded, as SageMaker's containers do, so scripts that parse
``SM_HOSTS`` or ``SM_TRAINING_ENV`` with ``json.loads`` keep working.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from contract import variables
from contract.hyperparameters import to_cli_args
from contract.instance_config import InstanceConfig

LOG_LEVEL = 20  # logging.INFO


def training_env(config: InstanceConfig, *, num_gpus: int, num_cpus: int) -> dict[str, Any]:
    """SM_TRAINING_ENV: the whole environment as one dict."""
    paths = config.paths
    return {
        "job_name": config.job_name,
        "current_host": config.current_host,
        "current_instance_type": config.instance_type,
        "hosts": config.hosts,
        "distribution_hosts": config.hosts,
        "current_instance_group": config.resource_config.get("current_group_name", ""),
        "current_instance_group_hosts": config.hosts,
        "instance_groups": [
            group["instance_group_name"]
            for group in config.resource_config.get("instance_groups", [])
        ],
        "is_hetero": False,
        "master_hostname": config.master_host,
        "is_master": config.is_master,
        "host_addresses": config.host_addresses,
        "network_interface_name": config.network_interface,
        "num_gpus": num_gpus,
        "num_cpus": num_cpus,
        "hyperparameters": config.hyperparameters,
        "additional_framework_parameters": config.framework_params,
        "channel_input_dirs": {
            name: str(paths.data / name) for name in sorted(config.spec.channel_uris)
        },
        "input_data_config": config.input_data_config,
        "resource_config": config.resource_config,
        "distribution": config.spec.distribution,
        "user_entry_point": config.spec.entry_point,
        "module_name": PurePosixPath(config.spec.entry_point).stem,
        "module_dir": config.spec.source_uri,
        "log_level": LOG_LEVEL,
        "base_dir": str(paths.base),
        "model_dir": str(paths.model),
        "input_dir": str(paths.input),
        "input_config_dir": str(paths.config),
        "output_dir": str(paths.output),
        "output_data_dir": str(paths.output_data),
        "output_intermediate_dir": str(paths.intermediate),
        "checkpoint_dir": str(paths.checkpoints),
    }


def script_environment(
    config: InstanceConfig, inherited: Mapping[str, str], *, num_gpus: int, num_cpus: int
) -> dict[str, str]:
    """What the user's script runs with: ``inherited`` (the runtime's own, less its
    secrets), the job's own ``environment``, and the SageMaker contract over both."""
    return _environment(config, inherited, config.spec.environment, num_gpus, num_cpus)


def launcher_environment(
    config: InstanceConfig, inherited: Mapping[str, str], *, num_gpus: int, num_cpus: int
) -> dict[str, str]:
    """What the processes a launcher starts for itself run with (mpirun, its daemons and
    their launch agents, Runyard's helpers): the script's environment as it would be had
    the job set no variables of its own. The job's variables are the script's alone: one
    such as LD_PRELOAD or PYTHONPATH would change what those processes load and run."""
    return _environment(config, inherited, {}, num_gpus, num_cpus)


def _environment(
    config: InstanceConfig,
    inherited: Mapping[str, str],
    job: Mapping[str, str],
    num_gpus: int,
    num_cpus: int,
) -> dict[str, str]:
    paths = config.paths
    env = {key: value for key, value in inherited.items() if key not in variables.PRIVATE}
    env.update(job)
    channels = sorted(config.spec.channel_uris)
    full = training_env(config, num_gpus=num_gpus, num_cpus=num_cpus)
    env.update(
        {
            variables.TRAINING_JOB_NAME: config.job_name,
            variables.BASE_DIR: str(paths.base),
            variables.SAGEMAKER_BASE_DIR: str(paths.base),
            variables.SM_MODEL_DIR: str(paths.model),
            variables.SM_INPUT_DIR: str(paths.input),
            variables.SM_INPUT_CONFIG_DIR: str(paths.config),
            variables.SM_OUTPUT_DIR: str(paths.output),
            variables.SM_OUTPUT_DATA_DIR: str(paths.output_data),
            variables.SM_OUTPUT_INTERMEDIATE_DIR: str(paths.intermediate),
            variables.SM_CHECKPOINT_DIR: str(paths.checkpoints),
            variables.SM_CHANNELS: json.dumps(channels),
            variables.SM_HPS: json.dumps(config.hyperparameters),
            variables.SM_HOSTS: json.dumps(config.hosts),
            variables.SM_CURRENT_HOST: config.current_host,
            variables.SM_CURRENT_INSTANCE_TYPE: config.instance_type,
            variables.SM_NUM_GPUS: str(num_gpus),
            variables.SM_NUM_CPUS: str(num_cpus),
            variables.SM_RESOURCE_CONFIG: json.dumps(config.resource_config),
            variables.SM_INPUT_DATA_CONFIG: json.dumps(config.input_data_config),
            variables.SM_USER_ENTRY_POINT: config.spec.entry_point,
            variables.SM_USER_ARGS: json.dumps(to_cli_args(config.hyperparameters)),
            variables.SM_FRAMEWORK_PARAMS: json.dumps(config.framework_params),
            variables.SM_TRAINING_ENV: json.dumps(full),
            variables.SM_LOG_LEVEL: str(LOG_LEVEL),
            variables.SM_NETWORK_INTERFACE_NAME: config.network_interface,
            variables.SM_MODULE_NAME: full["module_name"],
            variables.SM_MODULE_DIR: config.spec.source_uri,
            "PYTHONUNBUFFERED": "1",
        }
    )
    # What the framework's container sets for every job; the job's own environment wins.
    for key, value in framework_environment(config, env).items():
        env[key] = job.get(key, value)
    for name in channels:
        env[variables.sm_channel(name)] = str(paths.data / name)
    for key, value in config.hyperparameters.items():
        env[variables.sm_hp(key)] = value if isinstance(value, str) else json.dumps(value)
    return env


def framework_environment(config: InstanceConfig, env: Mapping[str, str]) -> dict[str, str]:
    """What SageMaker's container for the job's framework exports before it runs any
    script, distributed or not (``env``: the script's environment so far). PyTorch's
    names the rendezvous: scripts call ``init_process_group(rank=hosts.index(
    current_host), world_size=len(hosts))`` with no init method and rely on it.
    TensorFlow's sets its logging and its S3 file system's variables."""
    if config.spec.framework == "pytorch":
        return {
            "MASTER_ADDR": config.master_addr,
            "MASTER_PORT": str(config.master_port),
            "NCCL_IB_DISABLE": "1",
            "NCCL_DEBUG": "WARN",
        }
    if config.spec.framework == "tensorflow":
        found = {"TF_CPP_MIN_LOG_LEVEL": "1", "S3_USE_HTTPS": "1"}
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if region:
            found["S3_REGION"] = region
        return found
    return {}
