"""The config files an instance is given under ``<base>/input/config/``, and the whole
config the runtime reads from them.

Three are SageMaker's own (hyperparameters, resource and input-data config, in its key
names, so scripts that read them directly keep working); ``runyard.json`` carries what
only Runyard's runtime needs: the job's description, the backend's placement of the
instance and its sandbox, three records in one (``RunyardConfig``). Every backend writes
them (``provisioning.instance_files``), by whatever means it has; the runtime reads them
with ``load``, with the standard library alone (the training image has nothing else).
The key names of each are defined here once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from contract import hyperparameters as hp
from contract import json_records, modes, storage
from contract.images import BUILTIN
from contract.layout import (
    DEFAULT_TENSORBOARD_PATH,
    HYPERPARAMETERS_FILE,
    INPUT_DATA_CONFIG_FILE,
    RESOURCE_CONFIG_FILE,
    RUNYARD_CONFIG_FILE,
    Paths,
    checkpoint_dir,
)
from contract.spec import Channel, JobSpec

# SageMaker's name for the one group of instances a job has.
GROUP_NAME = "homogeneousCluster"


class ConfigError(Exception):
    """A config file is missing or malformed."""


class Isolation(StrEnum):
    """What keeps one instance of a job apart from the others."""

    # A machine of its own: a pod, an EC2 instance.
    MACHINE = "machine"
    # Linux namespaces on the server's machine: its own host name, network address,
    # /opt/ml and processes, as a machine of its own would have.
    NAMESPACES = "namespaces"
    # Nothing: the instances share the server's machine, its host name and network
    # (where namespaces cannot be used).
    SHARED = "shared"
    # A container of the job's own image on the server's machine (podman or Docker), on
    # the job's network: its own host name, address, /opt/ml and processes.
    CONTAINER = "container"


@dataclass(frozen=True, kw_only=True)
class JobDescription:
    """What the job is, as each of its instances sees it whichever backend runs it: the
    job's own description as the server keeps it (``spec``, the stored record's
    instance-facing part), and what the server decided for this start of it
    (``provisioning.instance_files.describe``). A field of the job that the runtime needs
    is a ``JobSpec`` field (and the record's, which it is copied from by name): it reaches
    the instance with nothing added here."""

    job_name: str
    job_id: str
    spec: JobSpec
    # Which start of the job this is (0 the first), sent with every report so the service
    # can tell this attempt's words from a late one of an earlier attempt.
    attempt: Annotated[int, json_records.COUNT] = 0
    # The number of this attempt's first log line (lines of earlier attempts are stored).
    first_log_seq: Annotated[int, json_records.COUNT] = 1
    # The image the job's processes run from (``contract.images``), as the backend found
    # it: the catalog's name for the spec's choice where they differ.
    image: str = BUILTIN
    # Where the job's file:// URIs may lead, held to when the runtime uses them
    # (contract.file_confinement): read and written in ``file_roots``, only read in
    # ``read_only_roots``; both empty: not checked here, unless ``confine_files`` (a
    # project granted no local place: every file:// URI is refused).
    file_roots: tuple[str, ...] = ()
    read_only_roots: tuple[str, ...] = ()
    confine_files: bool = False
    # The service gives the job AWS credentials of its own (short-lived, limited to its
    # own S3 locations): the runtime asks for them and relays them to the job's processes
    # as a container credentials endpoint. False: the instance's machine has its own (an
    # instance profile, a pod's service account).
    aws_credentials: bool = False
    # How often the runtime samples the instance's CPU, memory, disk and GPUs for the
    # service (runtime.reporting.instance_metrics), in seconds; 0: never.
    instance_metrics_seconds: Annotated[float, json_records.SECONDS] = 10.0


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where the instance is among the job's and how it reaches the others: what each
    backend decides for the machines it gives, in its own package."""

    # algo-1's name where the job's processes can look the hosts' names up, as SageMaker's
    # PyTorch container sets MASTER_ADDR; its address where they cannot (instances that
    # share a machine and its /etc/hosts).
    master_addr: str
    master_port: Annotated[int, json_records.PORT]
    # How mpirun on the first instance reaches the others (argv prefix; empty if the
    # backend has none).
    launch_agent: tuple[str, ...] = ()
    # Where instances are separate machines: the port of the runtime's own launch agent
    # (runtime.launch.remote_agent), through which mpirun reaches them; None elsewhere.
    agent_port: Annotated[int | None, json_records.PORT] = None
    # Every instance of the job runs on this one machine (the local backend), under the
    # same hostname: Open MPI's shared-memory segments are named after the hostname and
    # each instance's local ranks, so two instances' ranks would map the same segment.
    shared_machine: bool = False
    # Where the runtime learns of a spot interruption itself ("ec2": the instance metadata
    # service); None where the service is told some other way.
    spot_notice: str | None = None
    isolation: str = Isolation.MACHINE.value
    # What the first instance says once in the job's log before anything else (why the
    # instances share the machine, say).
    notices: tuple[str, ...] = ()
    # Where instances have a network of their own: after how long without reaching any of
    # its peers an instance has lost the job's network (and the job restarts); None: never.
    peer_timeout_seconds: Annotated[float | None, json_records.SECONDS] = None


@dataclass(frozen=True, kw_only=True)
class Sandbox:
    """What keeps the job's processes apart where the instances are not machines of their
    own (the local backend's namespaces and containers on the server's machine). Every
    default is "none": a backend that gives each instance a machine leaves it so."""

    # The instance's network namespace (a path), where the runtime puts the processes it
    # starts for the job; the runtime itself keeps the machine's network, to report,
    # fetch and store.
    network_namespace: str | None = None
    # With a way out of the job's network: the /etc/resolv.conf the job's processes see,
    # where the machine's own names a resolver on its loopback (which is the instance's
    # own from inside); "" for the machine's own.
    resolv_conf: str = ""
    # The image's interpreter: "" for the runtime's own, as in a training container.
    image_python: str = ""
    # The local backend's image store and the image's digest there, for a catalog image:
    # the runtime waits for its build to end when it is being built ("" otherwise).
    image_store: str = ""
    image_digest: str = ""
    # Where the job's layer (its requirements) is made, shared by its instances on this
    # machine; "" for one of the instance's own (a machine of its own).
    job_layer: str = ""
    # The download cache the job's installs share with other jobs' (pip's); "" for pip's.
    download_cache: str = ""
    # What the instance sees read-only besides the runtime's own environment (the
    # server's, the image store).
    read_only_paths: tuple[str, ...] = ()
    # What the job's processes must not see at all (the server's home, its database, logs
    # and other jobs), each covered by an empty directory; the job's processes run as a
    # user of their own (runtime.linux.confine).
    hidden_paths: tuple[str, ...] = ()
    # The backend left the job's SSH keys for this instance in ``contract.ssh.KEYS_DIR``;
    # the runtime gives the instance an sshd of the job's user's own on port 22, as
    # SageMaker's containers have one (``runtime.instance.ssh``).
    ssh: bool = False
    # A custom container: the OCI image the job's processes run in, and the engine's
    # command that runs it (``podman``); the runtime itself stays outside it.
    container_image: str = ""
    container_engine: tuple[str, ...] = ()


# A machine of its own: nothing to keep apart.
NO_SANDBOX = Sandbox()


@dataclass(frozen=True, kw_only=True)
class RunyardConfig(Sandbox, Placement, JobDescription):
    """``runyard.json``: the job's description, the instance's placement and its sandbox,
    in one flat object (each field once, under its own name)."""

    @classmethod
    def of(
        cls, job: JobDescription, placement: Placement, sandbox: Sandbox = NO_SANDBOX
    ) -> RunyardConfig:
        return cls(**_fields_of(job), **_fields_of(placement), **_fields_of(sandbox))

    def to_json(self) -> str:
        return dump(json_records.to_data(self))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunyardConfig:
        return cls(**_runyard_fields(data))


def _fields_of(part: JobDescription | Placement | Sandbox) -> dict[str, Any]:
    # Not dataclasses.asdict: that copies every dict and list inside, for nothing.
    return {item.name: getattr(part, item.name) for item in fields(part)}


def _runyard_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """``runyard.json``'s values by field (``contract.json_records``: each field's
    annotation says how it is read): a key it lacks is its field's default, one it has that
    Runyard does not know is a newer server's and left alone."""
    try:
        return json_records.values(RunyardConfig, data)
    except json_records.RecordError as exc:
        if exc.missing:
            raise ConfigError(f"instance config is missing {exc.key!r}") from exc
        raise ConfigError(f"{RUNYARD_CONFIG_FILE}: {exc.key} {exc.problem}") from exc


def resource_config(
    host: str,
    hosts: list[str],
    instance_type: str,
    *,
    network_interface: str,
    host_addresses: dict[str, str],
) -> dict[str, Any]:
    """``resourceconfig.json``: SageMaker's keys, and Runyard's ``host_addresses`` so hosts
    can be reached where names do not resolve."""
    return {
        "current_host": host,
        "current_instance_type": instance_type,
        "current_group_name": GROUP_NAME,
        "hosts": hosts,
        "network_interface_name": network_interface,
        "instance_groups": [
            {"instance_group_name": GROUP_NAME, "instance_type": instance_type, "hosts": hosts}
        ],
        "host_addresses": host_addresses,
    }


def input_data_config(inputs: Mapping[str, Channel]) -> dict[str, dict[str, Any]]:
    """``inputdataconfig.json``: each channel in SageMaker's key names."""
    config: dict[str, dict[str, Any]] = {}
    for name, channel in sorted(inputs.items()):
        entry: dict[str, Any] = {
            "TrainingInputMode": channel.input_mode,
            "S3DataType": channel.s3_data_type,
            "S3DistributionType": channel.distribution,
            "RecordWrapperType": "None",
            "CompressionType": channel.compression,
        }
        if channel.content_type:
            entry["ContentType"] = channel.content_type
        config[name] = entry
    return config


def tensorboard_config(spec: JobSpec) -> dict[str, str]:
    """``tensorboardoutputconfig.json``: SageMaker's TensorBoardOutputConfig, the local
    path as the script sees it."""
    return {
        "LocalPath": spec.tensorboard_local_path or DEFAULT_TENSORBOARD_PATH,
        "S3OutputPath": spec.tensorboard_s3_output_path or "",
    }


def hyperparameters_file(values: Mapping[str, Any]) -> dict[str, str]:
    """``hyperparameters.json``: every value JSON-encoded, as the SageMaker SDK sends them."""
    return {key: hp.encode(values[key]) for key in sorted(values)}


def dump(data: Mapping[str, Any]) -> str:
    """A config file's text: what every backend writes byte for byte."""
    return json.dumps(data, indent=2) + "\n"


@dataclass(frozen=True, kw_only=True)
class InstanceConfig(RunyardConfig):
    """Everything the runtime knows of its instance: ``runyard.json``'s fields, what the
    SageMaker files say, and where the base directory is."""

    paths: Paths
    current_host: str
    hosts: list[str]
    host_addresses: dict[str, str]
    instance_type: str
    network_interface: str
    resource_config: dict[str, Any]
    input_data_config: dict[str, Any]
    # The script's own hyperparameters (the framework's ``sagemaker_`` ones are in
    # ``framework_params``), as its arguments and SM_HPS give them; ``spec.hyperparameters``
    # is the job's whole set, as it was submitted.
    hyperparameters: dict[str, Any]
    framework_params: dict[str, Any]

    @property
    def master_host(self) -> str:
        return self.hosts[0]

    @property
    def is_master(self) -> bool:
        return self.current_host == self.master_host

    @property
    def node_rank(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def mode(self) -> modes.Mode | None:
        """The distribution mode that is enabled, if any."""
        return modes.enabled_mode(self.spec.distribution)


def load(base: Path) -> InstanceConfig:
    config_dir = Paths(base).config
    runyard_fields = _runyard_fields(_read(config_dir / RUNYARD_CONFIG_FILE))
    spec: JobSpec = runyard_fields["spec"]
    paths = Paths(base, checkpoint_dir(base, spec.checkpoint_local_path))
    resource = _read(paths.config / RESOURCE_CONFIG_FILE)
    input_data = _read(paths.config / INPUT_DATA_CONFIG_FILE, default={})
    # The job's hyperparameters are written once, in SageMaker's file; the description
    # gets them back from it (``instance_files.describe``).
    job_hps = hp.decode(_read(paths.config / HYPERPARAMETERS_FILE, default={}))
    spec = replace(spec, hyperparameters=job_hps)
    runyard_fields["spec"] = spec
    user_hps, framework = hp.split_framework(job_hps)
    framework_hps = framework_hyperparameters(spec, runyard_fields["job_name"], paths)
    user_hps = {**framework_hps, **user_hps}
    try:
        return InstanceConfig(
            **runyard_fields,
            paths=paths,
            current_host=resource["current_host"],
            hosts=list(resource["hosts"]),
            host_addresses=dict(resource.get("host_addresses", {})),
            instance_type=resource.get("current_instance_type", "local"),
            network_interface=resource.get("network_interface_name", "eth0"),
            resource_config=resource,
            input_data_config=input_data,
            hyperparameters=user_hps,
            framework_params=framework,
        )
    except KeyError as exc:
        raise ConfigError(f"instance config is missing {exc.args[0]!r}") from exc


def framework_hyperparameters(spec: JobSpec, job_name: str, paths: Paths) -> dict[str, Any]:
    """What the SageMaker SDK's estimator for the job's framework adds to every job's
    hyperparameters, for a job submitted without it (the job's own win). TensorFlow's
    sends a ``model_dir``, which scripts pass straight to ``startswith`` or ``save``: the
    job's S3 output (``<output_path>/<job>/model``), or under mpirun, or where the output
    is not on S3, the instance's model directory (SM_MODEL_DIR, uploaded at the end)."""
    if spec.framework != "tensorflow":
        return {}
    mode = modes.enabled_mode(spec.distribution)
    if (mode is None or not mode.uses_mpi) and spec.output_path.startswith("s3://"):
        return {"model_dir": storage.join(spec.output_path, job_name, "model")}
    return {"model_dir": str(paths.model)}


def _read(path: Path, default: dict[str, Any] | None = None) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        if default is not None:
            return default
        raise ConfigError(f"{path} is missing") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    return data
