"""The config files of one instance, as every backend writes them (by whatever means it
has: files on disk, a ConfigMap, user-data). Their shapes are ``contract.instance_config``'s;
what differs between backends (addresses, ports, the launch agent) is given here."""

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
    isolation: str = files.Isolation.MACHINE.value,
    network_namespace: str | None = None,
    resolv_conf: str = "",
    notices: tuple[str, ...] = (),
    peer_timeout_seconds: float | None = None,
    image: str | None = None,
    image_python: str = "",
    image_store: str = "",
    image_digest: str = "",
    job_layer: str = "",
    download_cache: str = "",
    read_only_paths: list[str] | None = None,
    hidden_paths: list[str] | None = None,
    ssh: bool = False,
    container_image: str = "",
    container_engine: list[str] | None = None,
    names_resolve: bool = True,
) -> dict[str, str]:
    """Each file's text by its path below the instance's base directory.

    ``names_resolve``: whether the job's processes can look up the hosts' names (algo-1,
    ...), as on SageMaker, whose PyTorch container sets ``MASTER_ADDR`` to algo-1's name:
    where they cannot (instances that share a machine and its /etc/hosts), algo-1's
    address stands in for it."""
    spec = request.spec
    hosts = request.hosts
    runyard = files.RunyardConfig(
        job_name=request.job.name,
        job_id=request.job.id,
        entry_point=spec.entry_point,
        source_uri=spec.source_uri,
        distribution=spec.distribution,
        channels={name: channel.uri for name, channel in sorted(spec.inputs.items())},
        output_path=spec.output_path,
        environment=dict(sorted(spec.environment.items())),
        master_addr=hosts[0] if names_resolve else host_addresses[hosts[0]],
        master_port=master_port,
        framework=spec.framework,
        launch_agent=tuple(launch_agent),
        agent_port=agent_port,
        shared_machine=shared_machine,
        attempt=request.job.attempt,
        first_log_seq=request.first_log_seq,
        checkpoint_uri=spec.checkpoint_s3_uri,
        checkpoint_local_path=spec.checkpoint_local_path,
        spot_notice=spot_notice,
        isolation=isolation,
        network_namespace=network_namespace,
        resolv_conf=resolv_conf,
        notices=notices,
        peer_timeout_seconds=peer_timeout_seconds,
        container_command=(*spec.container_entrypoint, *spec.container_arguments),
        image=image or spec.image.label,
        image_python=image_python,
        image_store=image_store,
        image_digest=image_digest,
        job_layer=job_layer,
        download_cache=download_cache,
        read_only_paths=tuple(read_only_paths or ()),
        hidden_paths=tuple(hidden_paths or ()),
        ssh=ssh,
        file_roots=request.file_roots,
        read_only_roots=request.read_only_roots,
        confine_files=request.confine_files,
        aws_credentials=request.aws_credentials,
        instance_metrics_seconds=request.instance_metrics_seconds,
        container_image=container_image,
        container_engine=tuple(container_engine or ()),
    )
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
