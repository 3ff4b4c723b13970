"""What every provisioner backend offers the reconciler.

The base class owns the policy; a backend fills in small hooks. ``materialize`` is pure:
it builds exactly what ``apply`` would create (process argv, pod manifests, RunInstances
arguments) and that is what a dry run shows. Names derive from the job id, so a retried
task finds and adopts what an earlier attempt created instead of creating it twice.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar

import yaml

from service.jobs.schemas import JobCreate, host_names

PlanT = TypeVar("PlanT")

REDACTED = "<redacted>"
# How long teardown waits for processes to vanish after SIGKILL before calling it a failure.
KILL_WAIT_SECONDS = 10.0


class TeardownError(RuntimeError):
    """Something of the job could not be removed; the message says what."""


@dataclass(frozen=True)
class JobRef:
    id: str
    name: str


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a backend needs to start the instances of one job."""

    job: JobRef
    spec: JobCreate
    service_url: str
    token: str

    @property
    def hosts(self) -> list[str]:
        return host_names(self.spec.instance_count)


class InstanceState(StrEnum):
    RUNNING = "Running"
    EXITED = "Exited"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class InstanceStatus:
    host: str
    state: InstanceState
    exit_code: int | None = None
    # The last lines the instance printed itself, to explain an instance that vanished.
    last_output: str = ""


@dataclass(frozen=True)
class Materialized(Generic[PlanT]):
    backend: str
    plan: PlanT
    # The plan as plain data, secrets replaced by REDACTED: what a dry run returns.
    public: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The plan for people: YAML, with file contents shown as they will be written."""
        return yaml.dump(self.public, Dumper=_PlanDumper, sort_keys=False, width=100)


class _PlanDumper(yaml.SafeDumper):
    pass


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_PlanDumper.add_representer(str, _text)


class Backend(ABC, Generic[PlanT]):
    name: ClassVar[str]
    instance_types: ClassVar[frozenset[str]]

    def submit(self, request: LaunchRequest) -> Materialized[PlanT]:
        """Create the job's instances, or adopt them if an earlier attempt already did."""
        materialized = self.materialize(request)
        self.apply(materialized)
        return materialized

    def cancel(self, job: JobRef, *, force: bool) -> None:
        """Ask every instance to end (SIGTERM-like), or end them at once with ``force``."""
        if self.exists(job):
            self._cancel_existing(job, force=force)

    @abstractmethod
    def materialize(self, request: LaunchRequest) -> Materialized[PlanT]: ...

    @abstractmethod
    def apply(self, materialized: Materialized[PlanT]) -> None: ...

    @abstractmethod
    def exists(self, job: JobRef) -> bool: ...

    @abstractmethod
    def describe(self, job: JobRef) -> dict[str, InstanceStatus] | None:
        """The state of each instance by host, or None when the job has none at all."""

    @abstractmethod
    def _cancel_existing(self, job: JobRef, *, force: bool) -> None: ...

    @abstractmethod
    def teardown(self, job: JobRef) -> None:
        """End and remove everything the job has, waiting until nothing of it is left."""
