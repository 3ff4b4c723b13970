"""The instance's configuration, read from the files under ``<base>/input/config/``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime import hyperparameters as hp
from runtime.modes import DISTRIBUTION_MODES


class ConfigError(Exception):
    """A config file is missing or malformed."""


# What /opt/ml paths in a job spec mean on an instance whose base directory is elsewhere.
IMAGE_BASE_DIR = "/opt/ml"


@dataclass(frozen=True)
class Paths:
    """The base directory laid out as SageMaker's /opt/ml."""

    base: Path
    # checkpoint_local_path, where the job gives one; else checkpoints/ in the base dir.
    checkpoint_dir: Path | None = None

    @property
    def code(self) -> Path:
        return self.base / "code"

    @property
    def input(self) -> Path:
        return self.base / "input"

    @property
    def config(self) -> Path:
        return self.base / "input" / "config"

    @property
    def data(self) -> Path:
        return self.base / "input" / "data"

    @property
    def model(self) -> Path:
        return self.base / "model"

    @property
    def output(self) -> Path:
        return self.base / "output"

    @property
    def output_data(self) -> Path:
        return self.base / "output" / "data"

    @property
    def intermediate(self) -> Path:
        return self.base / "output" / "intermediate"

    @property
    def failure(self) -> Path:
        return self.base / "output" / "failure"

    @property
    def success(self) -> Path:
        return self.base / "output" / "success"

    @property
    def checkpoints(self) -> Path:
        return self.checkpoint_dir or self.base / "checkpoints"

    def create(self) -> None:
        for path in (
            self.code,
            self.data,
            self.model,
            self.output_data,
            self.intermediate,
            self.checkpoints,
        ):
            path.mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class InstanceConfig:
    paths: Paths
    job_name: str
    job_id: str
    current_host: str
    hosts: list[str]
    host_addresses: dict[str, str]
    instance_type: str
    network_interface: str
    resource_config: dict[str, Any]
    input_data_config: dict[str, Any]
    hyperparameters: dict[str, Any]
    framework_params: dict[str, Any]
    entry_point: str
    source_uri: str
    distribution: dict[str, Any]
    channels: dict[str, str]
    output_path: str
    environment: dict[str, str]
    master_addr: str
    master_port: int
    framework: str = "pytorch"
    # How mpirun on the first instance reaches the others (argv prefix; empty if the
    # backend has none).
    launch_agent: tuple[str, ...] = ()
    # Where instances are separate machines: the port of the runtime's own launch agent
    # (runtime.launch.remote_agent), through which mpirun reaches them; None elsewhere.
    agent_port: int | None = None
    # Every instance of the job runs on this one machine (the local backend), under the
    # same hostname: Open MPI's shared-memory segments are named after the hostname and
    # each instance's local ranks, so two instances' ranks would map the same segment.
    shared_machine: bool = False
    # Which start of the job this is (0 the first), sent with every report so the service
    # can tell this attempt's words from a late one of an earlier attempt.
    attempt: int = 0
    # The number of this attempt's first log line (lines of earlier attempts are stored).
    first_log_seq: int = 1
    # Where checkpoints are kept across restarts; None when the job keeps none.
    checkpoint_uri: str | None = None
    # "ec2" on a spot instance of EC2: watch its metadata for the interruption warning.
    spot_notice: str | None = None

    @property
    def master_host(self) -> str:
        return self.hosts[0]

    @property
    def is_master(self) -> bool:
        return self.current_host == self.master_host

    @property
    def node_rank(self) -> int:
        return self.hosts.index(self.current_host)

    def distribution_section(self, mode: str) -> dict[str, Any]:
        """A mode's options by dotted name (``smdistributed.dataparallel``); {} if absent."""
        section: Any = self.distribution
        for part in mode.split("."):
            section = section.get(part) if isinstance(section, dict) else None
        return section if isinstance(section, dict) else {}

    def distribution_enabled(self, mode: str) -> bool:
        return bool(self.distribution_section(mode).get("enabled"))

    @property
    def mode(self) -> str | None:
        """The distribution mode that is enabled, if any."""
        return next((key for key in DISTRIBUTION_MODES if self.distribution_enabled(key)), None)


def checkpoint_dir(base: Path, local_path: str | None) -> Path | None:
    """Where the script's checkpoints go: a path under /opt/ml is taken as relative to
    this instance's base directory (so /opt/ml/checkpoints is <base>/checkpoints)."""
    if not local_path:
        return None
    path = Path(local_path)
    if path.is_relative_to(IMAGE_BASE_DIR):
        return base / path.relative_to(IMAGE_BASE_DIR)
    return path


def load(base: Path) -> InstanceConfig:
    config_dir = Paths(base).config
    runyard = _read(config_dir / "runyard.json")
    paths = Paths(base, checkpoint_dir(base, runyard.get("checkpoint_local_path")))
    resource = _read(paths.config / "resourceconfig.json")
    input_data = _read(paths.config / "inputdataconfig.json", default={})
    raw_hps = _read(paths.config / "hyperparameters.json", default={})
    user_hps, framework = hp.split_framework(hp.decode(raw_hps))
    try:
        return InstanceConfig(
            paths=paths,
            job_name=runyard["job_name"],
            job_id=runyard["job_id"],
            current_host=resource["current_host"],
            hosts=list(resource["hosts"]),
            host_addresses=dict(resource.get("host_addresses", {})),
            instance_type=resource.get("current_instance_type", "local"),
            network_interface=resource.get("network_interface_name", "eth0"),
            resource_config=resource,
            input_data_config=input_data,
            hyperparameters=user_hps,
            framework_params=framework,
            entry_point=runyard["entry_point"],
            source_uri=runyard["source_uri"],
            distribution=dict(runyard.get("distribution", {})),
            channels=dict(runyard.get("channels", {})),
            output_path=runyard["output_path"],
            environment=dict(runyard.get("environment", {})),
            master_addr=runyard["master_addr"],
            master_port=int(runyard["master_port"]),
            framework=runyard.get("framework", "pytorch"),
            launch_agent=tuple(runyard.get("launch_agent", ())),
            agent_port=_optional_port(runyard.get("agent_port")),
            shared_machine=runyard.get("shared_machine") is True,
            attempt=_count(runyard, "attempt", 0),
            first_log_seq=_count(runyard, "first_log_seq", 1),
            checkpoint_uri=runyard.get("checkpoint_uri") or None,
            spot_notice=runyard.get("spot_notice") or None,
        )
    except KeyError as exc:
        raise ConfigError(f"instance config is missing {exc.args[0]!r}") from exc


def _optional_port(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ConfigError(f"agent_port must be a TCP port number, not {value!r}")
    return value


def _count(data: dict[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{key} must be a whole number, not {value!r}")
    return value


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
