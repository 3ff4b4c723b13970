"""The hosts file of the launch agent for instances that share one machine: for each
instance of a job, where and how a command mpirun sends "to" it runs.

The local backend writes it (``provisioning.local``) and hands its path to the agent
(``runtime.launch.local_agent``) on the agent's command line; both go through ``write``
and ``read`` here, so its keys are these fields, defined once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from contract import json_records


class AgentHostsError(ValueError):
    """The hosts file cannot be read, or a host's entry is malformed: says which key."""


@dataclass(frozen=True, kw_only=True)
class AgentHost:
    """One instance, as the launch agent runs a command on it."""

    # The instance's base directory: the agent waits until the instance marks it ready.
    base: str
    # Where the command runs: the instance's code directory.
    cwd: str
    # The instance's environment, which the command runs in: without its token and agent
    # key (``variables.PRIVATE``), since the instances' scripts can read this file.
    env: dict[str, str] = field(default_factory=dict)
    # The instance's share of the machine's CPUs; empty: the agent's own.
    cpus: list[Annotated[int, json_records.COUNT]] = field(default_factory=list)


def write(path: Path, hosts: Mapping[str, AgentHost]) -> None:
    data = {host: json_records.to_data(entry) for host, entry in hosts.items()}
    path.write_text(json.dumps(data, indent=2))


def read(path: Path) -> dict[str, AgentHost]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AgentHostsError(f"cannot read the hosts file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise AgentHostsError(f"the hosts file {path} is not a mapping of host names")
    return {str(host): _entry(str(host), entry) for host, entry in data.items()}


def _entry(host: str, data: Any) -> AgentHost:
    if not isinstance(data, dict):
        raise AgentHostsError(f"{host}: not a mapping")
    # Every key known: the agent runs commands by it, so a misspelt one is refused.
    try:
        return json_records.read(AgentHost, data, known_keys_only=True)
    except json_records.RecordError as exc:
        raise AgentHostsError(f"{host}.{exc.key}: {exc.problem}") from exc
