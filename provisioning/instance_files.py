"""The config files of one instance, as every backend writes them (by whatever means it
has: files on disk, a ConfigMap, user-data). Their shapes are ``contract.instance_config``'s:
the job's description is made here, once for every backend (``describe``); what differs
between backends (addresses, ports, the launch agent, a sandbox) each backend gives as its
``Placement`` and ``Sandbox``."""

from __future__ import annotations

from contract import instance_config as files
from contract.layout import (
    CONFIG_DIR,
    HYPERPARAMETERS_FILE,
    INPUT_DATA_CONFIG_FILE,
    RESOURCE_CONFIG_FILE,
    RUNYARD_CONFIG_FILE,
)
from provisioning.base import LaunchRequest


def describe(request: LaunchRequest) -> files.JobDescription:
    """The job as each of its instances sees it, from what the service launches."""
    spec = request.spec
    return files.JobDescription(
        job_name=request.job.name,
        job_id=request.job.id,
        entry_point=spec.entry_point,
        source_uri=spec.source_uri,
        distribution=spec.distribution,
        channels={name: channel.uri for name, channel in sorted(spec.inputs.items())},
        output_path=spec.output_path,
        output_compression=spec.output_compression,
        environment=dict(sorted(spec.environment.items())),
        framework=spec.framework,
        attempt=request.job.attempt,
        first_log_seq=request.first_log_seq,
        # An empty one is none: the runtime tells the two apart only by None.
        checkpoint_uri=spec.checkpoint_s3_uri or None,
        checkpoint_local_path=spec.checkpoint_local_path or None,
        container_command=(*spec.container_entrypoint, *spec.container_arguments),
        image=spec.image.label,
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
    return {
        f"{CONFIG_DIR}/{HYPERPARAMETERS_FILE}": files.dump(
            files.hyperparameters_file(spec.hyperparameters)
        ),
        f"{CONFIG_DIR}/{RESOURCE_CONFIG_FILE}": files.dump(resource),
        f"{CONFIG_DIR}/{INPUT_DATA_CONFIG_FILE}": files.dump(files.input_data_config(spec.inputs)),
        f"{CONFIG_DIR}/{RUNYARD_CONFIG_FILE}": runyard.to_json(),
    }
