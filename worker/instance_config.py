"""The files an instance's runtime reads from ``<base>/input/config/``.

Three are SageMaker's own (hyperparameters, resource and input-data config, in its key
names, so scripts that read them directly keep working); ``runyard.json`` carries what
only the runtime needs. Every backend writes the same files, by whatever means it has.
"""

from __future__ import annotations

import json
from typing import Any

from service.jobs.schemas import encode_hyperparameter
from worker.backends.base import LaunchRequest

CONFIG_DIR = "input/config"
GROUP_NAME = "homogeneousCluster"


def instance_files(
    request: LaunchRequest,
    host: str,
    *,
    host_addresses: dict[str, str],
    master_port: int,
    network_interface: str,
    launch_agent: list[str],
    agent_port: int | None = None,
    shared_machine: bool = False,
    spot_notice: str | None = None,
) -> dict[str, str]:
    spec = request.spec
    hosts = request.hosts
    hyperparameters = {
        key: encode_hyperparameter(spec.hyperparameters[key])
        for key in sorted(spec.hyperparameters)
    }
    resource_config = {
        "current_host": host,
        "current_instance_type": spec.instance_type,
        "current_group_name": GROUP_NAME,
        "hosts": hosts,
        "network_interface_name": network_interface,
        "instance_groups": [
            {"instance_group_name": GROUP_NAME, "instance_type": spec.instance_type, "hosts": hosts}
        ],
        "host_addresses": host_addresses,
    }
    input_data_config: dict[str, dict[str, Any]] = {}
    for name, channel in sorted(spec.inputs.items()):
        entry: dict[str, Any] = {
            "TrainingInputMode": channel.input_mode,
            "S3DataType": channel.s3_data_type,
            "S3DistributionType": channel.distribution,
            "RecordWrapperType": "None",
            "CompressionType": channel.compression,
        }
        if channel.content_type:
            entry["ContentType"] = channel.content_type
        input_data_config[name] = entry
    runyard_config = {
        "job_name": request.job.name,
        "job_id": request.job.id,
        "entry_point": spec.entry_point,
        "source_uri": spec.source_uri,
        "distribution": spec.distribution.model_dump(exclude_none=True),
        "channels": {name: channel.uri for name, channel in sorted(spec.inputs.items())},
        "output_path": spec.output_path,
        "environment": dict(sorted(spec.environment.items())),
        "master_addr": host_addresses[hosts[0]],
        "master_port": master_port,
        "framework": spec.framework,
        "launch_agent": launch_agent,
        # Set where instances are separate machines: the port of the runtime's own launch
        # agent server (runtime.launch.remote_agent), which mpirun reaches them through.
        "agent_port": agent_port,
        # Set where every instance runs on one machine, as the local backend's do.
        "shared_machine": shared_machine,
        "attempt": request.job.attempt,
        "first_log_seq": request.first_log_seq,
        "checkpoint_uri": spec.checkpoint_s3_uri,
        "checkpoint_local_path": spec.checkpoint_local_path,
        # Where the runtime learns of a spot interruption itself ("ec2": the instance
        # metadata service); None where the service is told some other way.
        "spot_notice": spot_notice,
    }
    return {
        f"{CONFIG_DIR}/hyperparameters.json": _dump(hyperparameters),
        f"{CONFIG_DIR}/resourceconfig.json": _dump(resource_config),
        f"{CONFIG_DIR}/inputdataconfig.json": _dump(input_data_config),
        f"{CONFIG_DIR}/runyard.json": _dump(runyard_config),
    }


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"
