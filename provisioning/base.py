"""What every provisioner backend offers the reconciler.

The base class owns the policy; a backend fills in small hooks. ``materialize`` is pure:
it builds exactly what ``apply`` would create (process argv, pod manifests, RunInstances
arguments) and that is what a dry run shows. It asks no one and reads nothing that may
be slow or fail: what only a launch can decide (the local backend's stand-in image and
subnet) a backend decides in ``submit``, and the dry run shows it as DECIDED_AT_LAUNCH.
Names derive from the job id, so a retried task finds and adopts what an earlier attempt
created instead of creating it twice.
"""

from __future__ import annotations

import ipaddress
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar
from urllib.parse import unquote, urlparse

import yaml
from pydantic import BaseModel

from contract.failure_causes import FailureCause
from contract.images import Catalog
from contract.instance_config import Isolation
from contract.problems import Problem
from contract.spec import JobSpec

# Masked values read as the job environment's do (contract.variables); backends name it here.
from contract.variables import REDACTED as REDACTED
from provisioning.catalog import InstanceCatalog

PlanT = TypeVar("PlanT")
ModelT = TypeVar("ModelT", bound=BaseModel)

# What a dry run shows where a launch decides (a local job's subnet): planning asks no one.
DECIDED_AT_LAUNCH = "<decided at launch>"
# How long teardown waits for processes to vanish after SIGKILL before calling it a failure.
KILL_WAIT_SECONDS = 10.0
# How much of an instance's console is kept when it is the only record of the instance.
CONSOLE_BYTES = 256 * 1024


class TeardownError(RuntimeError):
    """Something of the job could not be removed; the message says what."""


class LaunchError(RuntimeError):
    """The provider would not start the job's instances (capacity, a quota, a refusal);
    the message, naming the cause in the provider's words, is the job's failure reason.
    ``capacity`` says the provider had no such instances to give now: a spot job then
    waits and tries again, where any other job fails."""

    def __init__(self, message: str, *, capacity: bool = False) -> None:
        super().__init__(message)
        self.capacity = capacity


@dataclass(frozen=True)
class JobRef:
    id: str
    name: str
    # Which start of the job (0 the first; each restart one more): a backend whose names
    # outlive a teardown (EC2's client tokens) must not adopt an earlier attempt's.
    attempt: int = 0


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a backend needs to start the instances of one job."""

    job: JobRef
    spec: JobSpec
    service_url: str
    # Each host's own token: an instance may report for itself and nothing else.
    tokens: Mapping[str, str]
    # What the job's launch agents authenticate each other with (one for all its instances).
    agent_key: str = ""
    # The number of this attempt's first log line on every host, after the last stored
    # one: the service keeps only lines above each host's last seq.
    first_log_seq: int = 1
    # Where the job's file:// URIs may lead (RUNYARD_FILE_ROOTS and the artifact root, or
    # the places of the job's project): the instances' runtimes hold them to it when they
    # use them, not only at submission. Only read in ``read_only_roots``; held even with
    # no roots at all where ``confine_files``.
    file_roots: tuple[str, ...] = ()
    read_only_roots: tuple[str, ...] = ()
    confine_files: bool = False
    # The service gives each instance the job's own AWS credentials (through its runtime),
    # instead of the instance using its machine's.
    aws_credentials: bool = False
    # How often each instance's runtime samples its CPU, memory, disk and GPUs, in
    # seconds; 0: never.
    instance_metrics_seconds: float = 10.0
    # The catalog image an earlier launch of this job decided its instances run, and why
    # it is not the spec's ("" before the first launch): a relaunch keeps it rather than
    # deciding again, as the answer that decided it may have changed since.
    launched_image: str = ""
    launched_image_note: str = ""

    @property
    def hosts(self) -> list[str]:
        return self.spec.hosts


class ServerSettings(Protocol):
    """What building a backend reads of the server's settings (the service's Settings):
    what every backend shares; each backend's own settings are ``backend_settings``."""

    @property
    def home(self) -> Path: ...

    @property
    def jobs_dir(self) -> Path: ...

    @property
    def artifact_root(self) -> str: ...

    @property
    def stop_grace_seconds(self) -> float: ...

    @property
    def spot_grace_seconds(self) -> float: ...

    @property
    def teardown_grace_seconds(self) -> float: ...

    @property
    def catalog(self) -> Catalog: ...

    @property
    def instance_catalog(self) -> InstanceCatalog: ...

    @property
    def cache_dir(self) -> Path: ...

    def backend_settings(self, name: str) -> BaseModel | None:
        """The settings of the backend ``name`` (``RUNYARD_<NAME>__*``); None if it has none."""


def own_settings(settings: ServerSettings, name: str, model: type[ModelT]) -> ModelT:
    """The backend ``name``'s own settings, as the model its record names."""
    found = settings.backend_settings(name)
    if not isinstance(found, model):
        raise TypeError(f"the server's settings hold no {model.__name__} for backend {name!r}")
    return found


class InstanceState(StrEnum):
    # Created but not yet running: waiting for a node, an image, or capacity.
    PENDING = "Pending"
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
    # Why a PENDING instance waits, or why one ended, in the provider's words
    # ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu").
    reason: str = ""
    # A PENDING instance that already has its machine and is only starting on it (a
    # scheduled pod pulling its image): nothing is known to be wrong, and the start
    # timeout, which bounds the wait for capacity, does not count it.
    starting: bool = False
    # Why an instance that is neither RUNNING nor PENDING ended, as the backend reads its
    # own signals (each backend's table of them); None where it has none to go by, which
    # the reconciler takes for a lost instance.
    cause: FailureCause | None = None


@dataclass(frozen=True)
class Materialized(Generic[PlanT]):
    backend: str
    plan: PlanT
    # The plan as plain data, secrets replaced by REDACTED: what a dry run returns.
    public: dict[str, Any] = field(default_factory=dict)
    # What keeps the job's instances apart (contract.instance_config.Isolation).
    isolation: str = Isolation.MACHINE.value
    # The catalog image the instances run, as the backend decided it (the local one may
    # run another than the spec names, standing in for a version it cannot install), and
    # why it is not the spec's; "" where the backend runs the spec's as it is.
    image: str = ""
    image_note: str = ""

    def render(self) -> str:
        """The plan for people: YAML, with file contents shown as they will be written."""
        return yaml.dump(self.public, Dumper=_PlanDumper, sort_keys=False, width=100)


def unshared_file_uris(spec: JobSpec, shared_root: str | None) -> list[tuple[str | int, ...]]:
    """The fields whose file:// URIs instances on other machines cannot read: all of them,
    unless they lie under ``shared_root`` (the artifact root, mounted on every instance)."""
    shared = f"{shared_root.rstrip('/')}/" if shared_root else None
    return [
        loc
        for loc, uri in spec.storage_uris().items()
        if uri.startswith("file:") and not (shared and (uri + "/").startswith(shared))
    ]


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine itself, which no other machine can reach."""
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: whether it resolves on the instances is the operator's call


def file_uri_path(uri: str) -> str:
    """The local path of a file:// URI, percent-escapes decoded (file:///a%20b -> /a b)."""
    return unquote(urlparse(uri).path)


class _PlanDumper(yaml.SafeDumper):
    pass


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_PlanDumper.add_representer(str, _text)


class Backend(ABC, Generic[PlanT]):
    name: ClassVar[str]
    # How long every instance of a job may stay PENDING before the job fails (all or
    # nothing); None waits for as long as it takes.
    start_timeout: float | None = None

    def submit(self, request: LaunchRequest) -> Materialized[PlanT]:
        """Create the job's instances, or adopt them if an earlier attempt already did."""
        materialized = self.materialize(request)
        self.apply(materialized)
        return materialized

    def cancel(self, job: JobRef, *, force: bool, grace_seconds: float | None = None) -> None:
        """Ask every instance to end (SIGTERM-like), or end them at once with ``force``.

        ``grace_seconds`` is how long the scripts get before a backend that does the killing
        itself (Kubernetes) kills them: the stop grace when None, the spot grace for an
        interruption. Backends whose caller kills after the grace ignore it.
        """
        if self.exists(job):
            self._cancel_existing(job, force=force, grace_seconds=grace_seconds)

    def check(self, spec: JobSpec, service_url: str) -> list[Problem]:
        """Why this backend could never run the job here (checked at submission, so it is
        refused naming the field); the default accepts whatever the catalog allows."""
        return []

    def network_isolation_problem(self) -> str | None:
        """Why this backend cannot keep a job's instances off every network but their
        own (SageMaker's EnableNetworkIsolation), or None where it can. The default
        cannot: an instance's runtime reaches the service and storage from where its
        scripts run."""
        return f"the {self.name} backend cannot close its instances' network"

    def notices(self) -> list[str]:
        """What the server says as it starts of what this backend's instances lack here
        (a network of their own, a way out of it)."""
        return []

    def shared_between_projects_because(self) -> str | None:
        """Why jobs of different projects would share one machine here, where the
        operator has not said they may (the server then takes such jobs only while it has
        one project), or None. The default: wherever instances share one."""
        return self.shared_because()

    def shared_because(self) -> str | None:
        """Why jobs' instances would share one machine (and so could read one another's
        files and the server's), or None where each is a host of its own: a pod, an EC2
        instance, a local instance in namespaces."""
        return None

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
    def _cancel_existing(
        self, job: JobRef, *, force: bool, grace_seconds: float | None = None
    ) -> None: ...

    @abstractmethod
    def teardown(self, job: JobRef) -> None:
        """End and remove everything the job has, waiting until nothing of it is left."""

    def console(self, job: JobRef) -> dict[str, str]:
        """What each instance's runtime printed itself, by host, read before teardown removes
        it: the only record of an instance whose runtime never reached the service."""
        return {}

    def held_jobs(self) -> list[JobRef]:
        """Every job this backend still holds anything for (pods, instances), found from
        the provider's side: what the reaper compares with the jobs still live."""
        return []
