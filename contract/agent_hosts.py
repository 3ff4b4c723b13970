"""The hosts file of the launch agent for instances that share one machine: for each
instance of a job, where and how a command mpirun sends "to" it runs.

The local backend writes it (``provisioning.local``) and hands its path to the agent
(``runtime.launch.local_agent``) on the agent's command line; both go through ``write``
and ``read`` here, so its keys are these fields, defined once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


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
    cpus: list[int] = field(default_factory=list)


def write(path: Path, hosts: Mapping[str, AgentHost]) -> None:
    path.write_text(json.dumps({host: asdict(entry) for host, entry in hosts.items()}, indent=2))


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
    known = {item.name for item in fields(AgentHost)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise AgentHostsError(f"{host}.{unknown[0]}: not a key of the hosts file")
    for key in ("base", "cwd"):
        if not isinstance(data.get(key), str):
            raise AgentHostsError(f"{host}.{key}: must be a path, not {data.get(key)!r}")
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in env.items()
    ):
        raise AgentHostsError(f"{host}.env: must map names to strings")
    cpus = data.get("cpus", [])
    if not isinstance(cpus, list) or not all(
        isinstance(cpu, int) and not isinstance(cpu, bool) and cpu >= 0 for cpu in cpus
    ):
        raise AgentHostsError(f"{host}.cpus: must be a list of CPU numbers, not {cpus!r}")
    return AgentHost(base=data["base"], cwd=data["cwd"], env=dict(env), cpus=list(cpus))
