"""The config files of one instance, as every backend writes them (by whatever means it
has: files on disk, a ConfigMap, user-data). Their shapes are ``contract.instance_config``'s:
the job's description is made here, once for every backend (``describe``); what differs
between backends (addresses, ports, the launch agent, a sandbox) each backend gives as its
``Placement`` and ``Sandbox``."""

from __future__ import annotations

from dataclasses import replace

from contract import instance_config as files
from contract.layout import (
    CONFIG_DIR,
    HYPERPARAMETERS_FILE,
    INPUT_DATA_CONFIG_FILE,
    RESOURCE_CONFIG_FILE,
    RUNYARD_CONFIG_FILE,
    TENSORBOARD_CONFIG_FILE,
)
from provisioning.base import LaunchRequest


def describe(request: LaunchRequest) -> files.JobDescription:
    """The job as each of its instances sees it, from what the service launches. Its
    hyperparameters travel once, in SageMaker's own file (``hyperparameters.json``), where
    scripts read them; the instance puts them back in its ``spec`` (``instance_config.load``):
    EC2's user-data and a ConfigMap have limits that a large set would reach twice as soon."""
    return files.JobDescription(
        job_name=request.job.name,
        job_id=request.job.id,
        spec=replace(request.spec, hyperparameters={}),
        attempt=request.job.attempt,
        first_log_seq=request.first_log_seq,
        image=request.spec.image.label,
        file_roots=request.file_roots,
        read_only_roots=request.read_only_roots,
        confine_files=request.confine_files,
        aws_credentials=request.aws_credentials,
        instance_metrics_seconds=request.instance_metrics_seconds,
    )


def instance_files(
    request: LaunchRequest,
    host: str,
    placement: files.Placement,
    sandbox: files.Sandbox = files.NO_SANDBOX,
    *,
    host_addresses: dict[str, str],
    network_interface: str,
    job: files.JobDescription | None = None,
) -> dict[str, str]:
    """Each file's text by its path below the instance's base directory: the job's
    description (``describe``, or ``job`` where the backend changed part of it), with the
    backend's ``placement`` and ``sandbox`` of ``host``, and where each host is."""
    spec = request.spec
    hosts = request.hosts
    runyard = files.RunyardConfig.of(job or describe(request), placement, sandbox)
    resource = files.resource_config(
        host,
        hosts,
        spec.instance_type,
        network_interface=network_interface,
        host_addresses=host_addresses,
    )
    written = {
        f"{CONFIG_DIR}/{HYPERPARAMETERS_FILE}": files.dump(
            files.hyperparameters_file(spec.hyperparameters)
        ),
        f"{CONFIG_DIR}/{RESOURCE_CONFIG_FILE}": files.dump(resource),
        f"{CONFIG_DIR}/{INPUT_DATA_CONFIG_FILE}": files.dump(files.input_data_config(spec.inputs)),
        f"{CONFIG_DIR}/{RUNYARD_CONFIG_FILE}": runyard.to_json(),
    }
    if spec.tensorboard_s3_output_path:
        written[f"{CONFIG_DIR}/{TENSORBOARD_CONFIG_FILE}"] = files.dump(
            files.tensorboard_config(spec)
        )
    return written
