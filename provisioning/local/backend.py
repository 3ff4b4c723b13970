"""The local backend: each instance is a process group on this machine.

Layout under ``<jobs_dir>/<job id>/`` (names repeat across projects; ids do not)::

    plan.json           the materialized plan, so a retried launch adopts, never re-plans
    algo-N/             the instance's base directory (SM_BASE_DIR), laid out as in images
    algo-N.pid.json     (pid, start ticks) of the instance's leader
    algo-N.console.log  what the runtime itself printed (its last words if it dies)

Where Linux namespaces can be used (root, util-linux and iproute2 at hand), each instance
is a host of its own: its runtime is PID 1 of new UTS, mount and PID namespaces made by
``unshare`` (the leader is unshare itself), takes its SageMaker host name, shows its
directory at /opt/ml, and starts the job's processes in a network namespace of its own on
the job's private network (``network``). Elsewhere, or with RUNYARD_LOCAL_ISOLATION=shared,
the instances share the machine: they live on loopback, the rendezvous port picked once at
planning, and the first instance says so in the job's log.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from contract import agent_hosts, json_records, storage, variables
from contract.agent_hosts import AgentHost
from contract.hosts import RENDEZVOUS_PORT
from contract.images import BUILTIN, Catalog
from contract.instance_config import NO_SANDBOX, Isolation, JobDescription, Placement, Sandbox
from contract.layout import Paths, local_checkpoint_problem
from contract.problems import Problem
from contract.spec import JobSpec
from provisioning.base import (
    CONSOLE_BYTES,
    DECIDED_AT_LAUNCH,
    KILL_WAIT_SECONDS,
    Backend,
    InstanceState,
    InstanceStatus,
    JobRef,
    LaunchError,
    LaunchRequest,
    Materialized,
    ServerSettings,
    TeardownError,
    own_settings,
)
from provisioning.instance_files import describe, instance_files
from provisioning.local import (
    addresses,
    containers,
    egress,
    failure_causes,
    network,
    processes,
    ssh_keys,
    stand_ins,
)
from provisioning.local.images import ImageStore
from provisioning.local.settings import LocalSettings
from runtime.linux import mounts

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
HOSTS_FILE = "hosts.json"
# The job's layer (its requirements, installed once for its instances on this machine).
JOB_LAYER = "job-env"
# Runyard's packages: the server's code, which instances see read-only.
PACKAGES = (
    "contract",
    "provisioning",
    "service",
    "worker",
    "runtime",
    "libraries",
    "runyard",
    "migrations",
)
# What the first instance of a job says where its network has no way out though the job
# did not ask for network isolation, and where its instances have no resolver to ask.
CLOSED_NOTICE = "This job's instances reach one another and nothing beyond"
UNRESOLVED_NOTICE = (
    "Names do not resolve in this job's instances: this machine's resolvers listen on its "
    "loopback, which they do not reach"
)
# Each instance with namespaces is a machine of its own: the rendezvous
# (contract.hosts.RENDEZVOUS_PORT) and the launch agent have their usual ports.
AGENT_PORT = 7077
# What an instance inherits from the worker's environment: the machine's basics, and where
# S3 is (the job's code, channels and model may live there). Everything else (the server's
# AWS keys, database URLs, broker credentials) stays out of reach of user code: the job's
# AWS credentials are its own, from the service.
INHERITED_ENV = (
    *storage.S3_ENDPOINT_ENV,
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)


@dataclass(frozen=True)
class _Network:
    """A job's network as its plan has it, with what the first instance says of it and
    the /etc/resolv.conf its instances see ("" for the machine's own)."""

    network: network.JobNetwork
    notices: tuple[str, ...] = ()
    resolv_conf: str = ""


@dataclass(frozen=True)
class _Launch:
    """A plan being launched, which decides what a plan alone leaves to its launch; the
    machine's lock on choosing subnets, once taken, is kept in ``choosing`` (None: the
    caller chooses without it)."""

    choosing: contextlib.ExitStack | None = None


@dataclass(frozen=True)
class LocalInstance:
    host: str
    base_dir: str
    argv: list[str]
    env: dict[str, str]
    files: dict[str, str]
    # The CPUs this instance may use: a job's instances split the machine between them
    # as separate machines would, instead of each spawning a thread per core of all of it.
    cpus: list[int]


@dataclass(frozen=True)
class LocalPlan:
    job_id: str
    job_name: str
    job_dir: str
    master_port: int
    instances: list[LocalInstance]
    isolation: str = Isolation.SHARED.value
    # The job's private network, with namespaces.
    network: network.JobNetwork | None = None
    # The catalog image its instances run (contract.images).
    image: str = BUILTIN
    # Whether its instances have SSH between them (ssh_keys): their keys are made at launch.
    ssh: bool = False
    # Why the image is not the one the spec names, as its launch decided (stand_ins); in a
    # plan not launched (a dry run), what its launch will decide of it.
    image_note: str = ""


@contextlib.contextmanager
def _this_thread_on(cpus: Sequence[int]) -> Iterator[None]:
    """This thread confined to ``cpus`` meanwhile: a child it starts inherits them from its
    first instruction. Set on the child once started, they came too late for whatever it
    had read or started by then (under load, its threads and its own view of the CPUs).
    On Linux a thread's CPUs are its own: the server's other threads keep theirs."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def share_cpus(available: Sequence[int], instances: int) -> list[list[int]]:
    """Split ``available`` CPUs into ``instances`` equal parts (one CPU each, round robin,
    when there are more instances than CPUs)."""
    cpus = sorted(available)
    size = len(cpus) // instances
    if size == 0:
        return [[cpus[index % len(cpus)]] for index in range(instances)]
    return [cpus[index * size : (index + 1) * size] for index in range(instances)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


class LocalBackend(Backend[LocalPlan]):
    name = "local"

    def __init__(
        self,
        jobs_dir: Path,
        *,
        python: str = sys.executable,
        environ: Mapping[str, str] | None = None,
        allocate_port: Callable[[], int] = free_port,
        cpus: Sequence[int] | None = None,
        teardown_grace: float = 5.0,
        isolation: str = "auto",
        peer_timeout: float | None = 60.0,
        catalog: Catalog | None = None,
        images: ImageStore | None = None,
        download_cache: Path | None = None,
        container_engine: str = "auto",
        hidden: Sequence[Path] | None = None,
        image_fallback: stand_ins.Fallback = "nearest",
        network_pool: ipaddress.IPv4Network = addresses.DEFAULT_POOL,
        shared_projects: Literal["one", "many"] = "one",
    ) -> None:
        self.jobs_dir = jobs_dir
        # What the job's processes must not see of this machine: the server's home (its
        # token, keys, database, logs, other jobs), beside the jobs by default.
        self.hidden = [jobs_dir.parent] if hidden is None else list(hidden)
        self.catalog = catalog or Catalog()
        # Where catalog images are built; beside the jobs by default.
        self.images = images or ImageStore(jobs_dir.parent / "images")
        # The cache the jobs' installs share (pip's), beside the jobs by default.
        self.download_cache = download_cache or jobs_dir.parent / "cache" / "pip"
        # What runs custom containers: "auto", or the engine's command (containers.find).
        self.container_engine = container_engine
        # What a SageMaker version the package index cannot install here runs on: the
        # nearest catalog image, or nothing (stand_ins).
        self.image_fallback = image_fallback
        self.python = python
        self.environ = os.environ if environ is None else environ
        self.allocate_port = allocate_port
        self.cpus = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)
        self.teardown_grace = teardown_grace
        # "auto": namespaces where they can be used; "namespaces": only so; "shared": never.
        self.isolation = isolation
        # With namespaces, an instance that reaches none of its peers for this long has lost
        # the job's network (runtime.instance.peers); None: never said.
        self.peer_timeout = peer_timeout
        # Where jobs' networks take their subnets (addresses).
        self.network_pool = network_pool
        # Whether jobs of every project may share the machine ("many"), or only while the
        # server has one project ("one").
        self.shared_projects = shared_projects

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> LocalBackend:
        own = own_settings(settings, cls.name, LocalSettings)
        return cls(
            settings.jobs_dir,
            teardown_grace=settings.teardown_grace_seconds,
            isolation=own.isolation,
            peer_timeout=own.peer_timeout_seconds or None,
            catalog=settings.catalog,
            images=ImageStore(own.images_dir(settings.home)),
            download_cache=settings.cache_dir / "pip",
            container_engine=own.container_engine,
            image_fallback=own.image_fallback,
            network_pool=ipaddress.IPv4Network(own.network_pool),
            shared_projects=own.shared_projects,
        )

    def check(self, spec: JobSpec, service_url: str) -> list[Problem]:
        problems = []
        if (why := local_checkpoint_problem(spec.checkpoint_local_path)) is not None:
            problems.append(Problem(("checkpoint_local_path",), why))
        if spec.image.container is not None:
            problems += self._container_problems(spec.image.container)
        elif self.isolation == "namespaces" and (why := network.unavailable()) is not None:
            problems.append(
                Problem(("backend",), f"RUNYARD_LOCAL_ISOLATION is namespaces, but {why}")
            )
        if refused := stand_ins.refusal(spec, self.catalog, self.images, self.image_fallback):
            problems.append(refused)
        return problems

    def _container_problems(self, image: str) -> list[Problem]:
        """Why a custom container cannot run here: no engine, or no job network for it."""
        shown = f"{image[:120]!r} is a container image"
        engine, missing = containers.find(self.container_engine)
        if not engine:
            return [Problem(("image_uri",), f"{shown}, which needs a container engine: {missing}")]
        if (why := network.unavailable()) is not None:
            return [Problem(("image_uri",), f"{shown}, whose containers join the job's network, "
                            f"which needs Linux namespaces here: {why}")]  # fmt: skip
        return []

    def network_isolation_problem(self) -> str | None:
        # Instances that share the machine share its network: there is none to close.
        if (why := self.shared_because()) is not None:
            return f"local instances share this machine's network here ({why})"
        return None

    def notices(self) -> list[str]:
        if (why := self.shared_because()) is not None:
            return [f"local instances share this machine's host name and network: {why}"]
        found = []
        if (why := egress.unavailable()) is not None:
            found.append(f"local instances reach their job's other hosts and nothing beyond: {why}")
        if (why := ssh_keys.unavailable()) is not None:
            # SageMaker's MPI drivers (the SDK's ModelTrainer with MPI) need it.
            found.append(f"local instances have no SSH between them: {why}")
        return found

    def submit(self, request: LaunchRequest) -> Materialized[LocalPlan]:
        """Launch: ``launch_plan``'s plan, its network made, then its instances started."""
        # pip may take seconds to say which image: asked before the machine's lock.
        image = self.launch_image(request)
        # A job's subnet is chosen from those the machine's routes leave free, and taken
        # once its bridge holds its address: no other launch may choose in between. The
        # lock is taken as the subnet is chosen (``_network``) and let go once the
        # network is made, so that other launches never wait for this one's images,
        # keys or processes.
        with contextlib.ExitStack() as choosing:
            materialized = self.launch_plan(request, image, choosing)
            self._make_network(materialized)
        self.start(materialized)
        return materialized

    def shared_between_projects_because(self) -> str | None:
        if self.shared_projects == "many":
            return None
        return self.shared_because()

    def shared_because(self) -> str | None:
        # Where namespaces are asked for and cannot be used, ``check`` refuses the job.
        if self.isolation == "shared":
            return "RUNYARD_LOCAL_ISOLATION is shared"
        return network.unavailable()

    def _isolation(self) -> tuple[Isolation, str]:
        """How this server's instances are kept apart, and why not, when they are not."""
        if self.isolation == "shared":
            return Isolation.SHARED, "RUNYARD_LOCAL_ISOLATION is shared"
        why = network.unavailable()
        if why is None:
            return Isolation.NAMESPACES, ""
        if self.isolation == "namespaces":
            raise LaunchError(f"RUNYARD_LOCAL_ISOLATION is namespaces, but {why}")
        return Isolation.SHARED, why

    # -- planning ---------------------------------------------------------------------

    def materialize(self, request: LaunchRequest) -> Materialized[LocalPlan]:
        """The plan, asking no one (a dry run's): what only a launch decides, it shows so.
        The image is the one an earlier launch of the job decided, else the spec's as named
        (its ``image_note`` saying what the launch will decide of it); a network of the
        job's own with a way out has its subnet and addresses DECIDED_AT_LAUNCH."""
        return self._materialize(request, None, None)

    def launch_plan(
        self,
        request: LaunchRequest,
        image: stand_ins.ImageDecision | None = None,
        choosing: contextlib.ExitStack | None = None,
    ) -> Materialized[LocalPlan]:
        """The plan a launch applies: ``materialize``'s, with the image ``launch_image``
        decides (or ``image``, decided by it already) and the subnet of a job's network
        with a way out chosen from the machine's routes, the machine's lock on choosing
        taken first and kept in ``choosing`` (``submit`` keeps it until the network is
        made). LaunchError, naming the cause, where either cannot be decided."""
        return self._materialize(request, image or self.launch_image(request), choosing)

    def launch_image(self, request: LaunchRequest) -> stand_ins.ImageDecision:
        """The image the job's instances are launched on: the one an earlier launch of
        the job decided (kept: pip's answer may differ today), else the spec's, or the
        one that stands in for it (stand_ins: pip may be asked, which takes seconds)."""
        decided = self._decided_image(request, self._previous(request))
        if decided is not None:
            return decided
        return stand_ins.decide(request.spec.image, self.catalog, self.images, self.image_fallback)

    def _materialize(
        self,
        request: LaunchRequest,
        image: stand_ins.ImageDecision | None,
        choosing: contextlib.ExitStack | None,
    ) -> Materialized[LocalPlan]:
        """The plan; ``image`` None: a dry run's, deciding nothing."""
        launch = _Launch(choosing) if image is not None else None
        job_dir = self.jobs_dir / request.job.id
        previous = self._previous(request)
        if previous is not None:
            # Adopted as it was planned: the instances may be running by that plan.
            isolation, why = Isolation(previous.isolation), ""
        else:
            isolation, why = self._isolation()
        if request.spec.image.container is not None or isolation == Isolation.CONTAINER:
            job_network = self._network(request, previous, launch)
            plan = self._plan_containers(request, job_dir, job_network)
            return Materialized(self.name, plan, _public(plan), isolation=plan.isolation)
        # Not launching, the image is still to decide unless an earlier launch decided it.
        image = image or self._decided_image(request, previous)
        undecided = "" if image is not None else self._undecided_image(request)
        image = image or stand_ins.ImageDecision(request.spec.image.image)
        request = _on_image(request, image.image)
        notices = (image.note,) if image.note else ()
        if isolation == Isolation.NAMESPACES:
            job_network = self._network(request, previous, launch)
            plan = self._plan_hosts(request, job_dir, job_network, notices)
        else:
            port = previous.master_port if previous else self.allocate_port()
            plan = self._plan_shared(request, job_dir, port, why, notices)
        plan = replace(plan, image_note=image.note or undecided)
        return Materialized(
            self.name,
            plan,
            _public(plan),
            isolation=plan.isolation,
            image=image.image,
            image_note=image.note,
        )

    def _previous(self, request: LaunchRequest) -> LocalPlan | None:
        """The plan an earlier launch of this job left (None for another job's)."""
        previous = self._load_plan(self.jobs_dir / request.job.id)
        return previous if previous is not None and previous.job_id == request.job.id else None

    def _decided_image(
        self, request: LaunchRequest, previous: LocalPlan | None
    ) -> stand_ins.ImageDecision | None:
        """The image an earlier launch of the job decided: its plan's, which its instances
        may run, else the job's record of it (after a restart, whose teardown took the
        plan); None before the first launch, or where the catalog no longer has it."""
        if previous is not None:
            return stand_ins.ImageDecision(previous.image, previous.image_note)
        launched = request.launched_image
        known = launched in (request.spec.image.image, BUILTIN) or self.catalog.get(launched)
        if launched and known:
            return stand_ins.ImageDecision(launched, request.launched_image_note)
        return None

    def _undecided_image(self, request: LaunchRequest) -> str:
        """What the job's launch will decide of its image (stand_ins.undecided)."""
        chosen = request.spec.image
        return stand_ins.undecided(chosen, self.catalog, self.images, self.image_fallback)

    def _network(
        self, request: LaunchRequest, previous: LocalPlan | None, launch: _Launch | None
    ) -> _Network:
        """The job's network: the one an earlier launch planned, or a new one, with a way
        out unless the job asks for network isolation or this machine cannot give one.
        Its subnet is chosen (holding the machine's lock, where ``launch`` keeps it) only
        for a launch: a plan that is not launched shows it DECIDED_AT_LAUNCH."""
        job, isolated = request.job, request.spec.enable_network_isolation
        resolv_conf, nameservers = egress.machine_resolv_conf()
        if previous is not None and previous.network is not None:
            net = previous.network  # adopted as it was planned
        elif isolated or egress.unavailable() is not None:
            net = network.plan(job.id, request.hosts, pool=self.network_pool)
        else:
            net = self._own_network(request, nameservers, launch)
        if net.egress is None:
            why = None if isolated else egress.unavailable()
            return _Network(net, () if why is None else (f"{CLOSED_NOTICE}: {why}",))
        notices = () if net.egress.nameservers else (UNRESOLVED_NOTICE,)
        return _Network(net, notices, resolv_conf or "")

    def _own_network(
        self, request: LaunchRequest, nameservers: tuple[str, ...], launch: _Launch | None
    ) -> network.JobNetwork:
        """A network of the job's own, with a way out: on a subnet chosen now for a
        launch; for a plan that is not launched, one still to choose."""
        job, port = request.job, _port(request.service_url)
        if launch is None:
            return network.plan_at_launch(
                job.id, request.hosts, pool=self.network_pool, api_port=port,
                nameservers=nameservers,
            )  # fmt: skip
        # (Asked before the lock: a name may take the resolver a while.)
        api_addresses = _api_addresses(request.service_url)
        if launch.choosing is not None:
            launch.choosing.enter_context(network.choosing_subnet())
        try:
            subnet = network.choose_subnet(job.id, self.network_pool)
        except network.NetworkError as exc:
            raise LaunchError(f"no subnet for the job's network: {exc}") from exc
        return network.plan(
            job.id,
            request.hosts,
            subnet,
            pool=self.network_pool,
            api_port=port,
            api_addresses=api_addresses,
            nameservers=nameservers,
        )

    def _plan_hosts(
        self,
        request: LaunchRequest,
        job_dir: Path,
        job_network: _Network,
        notices: tuple[str, ...],
    ) -> LocalPlan:
        """Each instance a host of its own: its namespaces, its address, port and agent."""
        net = job_network.network
        ssh = ssh_keys.unavailable() is None
        unshare = shutil.which("unshare") or "unshare"
        # The runtime dies with its leader (--kill-child): whatever kills the instance kills
        # all of it, as PID 1's end takes every process of its namespace along.
        leader = [unshare, "--uts", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
        leader.append("--")
        placement = Placement(
            master_addr=request.hosts[0],
            master_port=RENDEZVOUS_PORT,
            launch_agent=(self.python, "-m", "runtime.launch.remote_agent"),
            agent_port=AGENT_PORT,
            isolation=Isolation.NAMESPACES,
            notices=(*notices, *job_network.notices, *self._cpu_notice(request)),
            peer_timeout_seconds=self.peer_timeout,
        )
        sandbox = Sandbox(
            hidden_paths=tuple(str(path) for path in self.hidden),
            resolv_conf=job_network.resolv_conf,
            ssh=ssh,
        )
        instances = self._instances(
            request,
            job_dir,
            [*leader, self.python, "-m", "runtime.train"],
            placement,
            sandbox,
            net=net,
            host_addresses=net.addresses,
            network_interface=network.INTERFACE,
        )
        return LocalPlan(
            request.job.id,
            request.job.name,
            str(job_dir),
            RENDEZVOUS_PORT,
            instances,
            isolation=Isolation.NAMESPACES.value,
            network=net,
            image=request.spec.image.image,
            ssh=ssh,
        )

    def _plan_containers(
        self, request: LaunchRequest, job_dir: Path, job_network: _Network
    ) -> LocalPlan:
        """Each instance a container of the job's own image on the job's network; its
        runtime stays on this machine, outside it, as SageMaker's agent does."""
        engine, why = containers.find(self.container_engine)
        if not engine:
            raise LaunchError(why)
        net = job_network.network
        placement = Placement(
            master_addr=request.hosts[0],
            master_port=RENDEZVOUS_PORT,
            isolation=Isolation.CONTAINER,
            notices=(*job_network.notices, *self._cpu_notice(request)),
        )
        sandbox = Sandbox(
            container_image=request.spec.image.container or "",
            container_engine=tuple(engine),
        )
        instances = self._instances(
            request,
            job_dir,
            [self.python, "-m", "runtime.train"],
            placement,
            sandbox,
            net=net,
            host_addresses=net.addresses,
            network_interface=network.INTERFACE,
        )
        return LocalPlan(
            request.job.id,
            request.job.name,
            str(job_dir),
            RENDEZVOUS_PORT,
            instances,
            isolation=Isolation.CONTAINER.value,
            network=net,
        )

    def _plan_shared(
        self,
        request: LaunchRequest,
        job_dir: Path,
        master_port: int,
        why: str,
        notices: tuple[str, ...],
    ) -> LocalPlan:
        """The instances share this machine: loopback, one host name, the local agent."""
        notices = (
            *notices,
            f"The instances of this job share this machine's host name and network: {why}",
            *self._cpu_notice(request),
        )
        agent = (self.python, "-m", "runtime.launch.local_agent", str(job_dir / HOSTS_FILE))
        placement = Placement(
            # The machine's /etc/hosts, which the instances share, names no algo-N (and
            # is the machine's, not a job's, to change): MASTER_ADDR is loopback's address.
            master_addr=LOOPBACK,
            master_port=master_port,
            launch_agent=agent,
            shared_machine=True,
            isolation=Isolation.SHARED,
            notices=notices,
        )
        instances = self._instances(
            request,
            job_dir,
            [self.python, "-m", "runtime.train"],
            placement,
            NO_SANDBOX,
            host_addresses=dict.fromkeys(request.hosts, LOOPBACK),
            network_interface="lo",
        )
        return LocalPlan(
            request.job.id,
            request.job.name,
            str(job_dir),
            master_port,
            instances,
            image=request.spec.image.image,
        )

    def _instances(
        self,
        request: LaunchRequest,
        job_dir: Path,
        argv: list[str],
        placement: Placement,
        sandbox: Sandbox,
        *,
        host_addresses: dict[str, str],
        network_interface: str,
        net: network.JobNetwork | None = None,
    ) -> list[LocalInstance]:
        """Every host's instance, with its share of the CPUs, in ``sandbox`` with the job's
        image and layers, and on the job's network ``net`` where it has one."""
        shares = share_cpus(self.cpus, len(request.hosts))
        job, sandbox = self._on_image(request, job_dir, sandbox)
        instances = []
        for host, cpus in zip(request.hosts, shares, strict=True):
            own = sandbox
            if net is not None:
                own = replace(sandbox, network_namespace=net.port(host).namespace_path)
            config = instance_files(
                request,
                host,
                placement,
                own,
                host_addresses=host_addresses,
                network_interface=network_interface,
                job=job,
            )
            instances.append(self._instance(request, job_dir, host, cpus, argv, config))
        return instances

    def _on_image(
        self, request: LaunchRequest, job_dir: Path, sandbox: Sandbox
    ) -> tuple[JobDescription, Sandbox]:
        """The job and ``sandbox`` with what the runtime needs of the job's image and
        layers: the image's interpreter (the server's own for the built-in image) and its
        place in the store, while the instances wait for its build; the job's layer; what
        the instances see read-only."""
        job = describe(request)
        sandbox = replace(
            sandbox,
            job_layer=str(job_dir / JOB_LAYER),
            download_cache=str(self.download_cache),
            read_only_paths=tuple(_server_paths(self.images.root)),
        )
        name = request.spec.image.image
        image = self.catalog.get(name)
        if name == BUILTIN or image is None:
            return job, sandbox
        stored = self.images.stored(image)
        sandbox = replace(
            sandbox,
            image_python=str(stored.python),
            image_store=str(stored.root),
            image_digest=stored.digest,
        )
        return replace(job, image=image.name), sandbox

    def _instance(
        self,
        request: LaunchRequest,
        job_dir: Path,
        host: str,
        cpus: list[int],
        argv: list[str],
        config: dict[str, str],
    ) -> LocalInstance:
        base_dir = job_dir / host
        inherited = {key: self.environ[key] for key in INHERITED_ENV if key in self.environ}
        env = {
            **inherited,
            **variables.instance_environment(
                base_dir=str(base_dir),
                service_url=request.service_url,
                job_name=request.job.name,
                job_id=request.job.id,
                host=host,
                token=request.tokens[host],
                agent_key=request.agent_key,
            ),
        }
        return LocalInstance(host, str(base_dir), argv, env, config, cpus)

    def _cpu_notice(self, request: LaunchRequest) -> tuple[str, ...]:
        count, cpus = len(request.hosts), len(self.cpus)
        if count <= cpus:
            return ()
        return (
            f"{count} instances share this machine's {cpus} CPU{'s' * (cpus > 1)}: each has "
            "one, which others use too, so they run slower than on machines of their own",
        )

    # -- side effects -----------------------------------------------------------------

    def apply(self, materialized: Materialized[LocalPlan]) -> None:
        self._make_network(materialized)
        self.start(materialized)

    def _make_network(self, materialized: Materialized[LocalPlan]) -> None:
        """The job's directory and plan, then its network: once the plan is recorded, a
        later attempt adopts the subnet the bridge holds instead of choosing another."""
        plan = materialized.plan
        if plan.network is not None and plan.network.subnet == DECIDED_AT_LAUNCH:
            raise ValueError(
                f"the plan of {plan.job_name} leaves its subnet to its launch (a dry run's): "
                "launch_plan, not materialize, plans what is applied"
            )
        job_dir = Path(plan.job_dir)
        previous = self._load_plan(job_dir)
        if previous is not None and previous.job_id != plan.job_id:
            # Left by an earlier job of the same name (a reset database, say); its
            # processes, if any, are ended with it.
            self.teardown(JobRef(previous.job_id, previous.job_name))
        job_dir.mkdir(parents=True, exist_ok=True)
        plan_file = job_dir / "plan.json"
        if not plan_file.exists():
            # What a later attempt needs to adopt the instances: hosts, port, pid files.
            # Never the token: the instances' own scripts can read this directory.
            _write_private(plan_file, json.dumps(materialized.public, indent=2))
        if plan.network is not None:
            network.create(plan.network)

    def start(self, materialized: Materialized[LocalPlan]) -> None:
        """Whatever the instances still need (their images, keys, hosts file), then the
        instances not yet started: ``apply`` once the network is made, as ``submit``
        calls it after letting go of the machine's lock."""
        plan = materialized.plan
        job_dir = Path(plan.job_dir)
        if plan.network is None and not (job_dir / HOSTS_FILE).exists():
            # What the launch agent needs to run a command "on" each instance for mpirun.
            agent_hosts.write(
                job_dir / HOSTS_FILE,
                {
                    instance.host: AgentHost(
                        base=instance.base_dir,
                        cwd=str(Paths(Path(instance.base_dir)).code),
                        env={k: v for k, v in instance.env.items() if k not in variables.PRIVATE},
                        cpus=instance.cpus,
                    )
                    for instance in plan.instances
                },
            )
        if not os.access(self.python, os.X_OK):
            # Said here, as starting it would say it: under unshare it would only fail
            # once inside, as an instance that died.
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self.python)
        image = self.catalog.get(plan.image)
        if image is not None:
            # Built in the background on first use; the instances wait for it.
            self.images.ensure(image)
        keys = None
        if plan.ssh and plan.network is not None:
            try:
                keys = ssh_keys.make(job_dir, plan.network.addresses, plan.job_id)
            except ssh_keys.SshKeyError as exc:
                raise LaunchError(f"the job's SSH keys: {exc}") from exc
        for instance in plan.instances:
            self._launch(job_dir, plan.job_id, instance, keys)

    def _launch(
        self, job_dir: Path, job_id: str, instance: LocalInstance, ssh: Path | None = None
    ) -> None:
        pid_file = job_dir / f"{instance.host}.pid.json"
        if pid_file.exists():
            return  # launched by an earlier attempt: adopt it
        # An attempt may have died between starting the process and recording it.
        stray = [
            identity
            for pid in processes.marked_processes(job_id, instance.host)
            if (identity := processes.identify(pid)) is not None
        ]
        if stray:
            oldest = min(stray, key=lambda identity: identity.start_ticks)
            _write_private(pid_file, json.dumps(asdict(oldest)))
            return
        base_dir = Path(instance.base_dir)
        for relative, content in instance.files.items():
            target = base_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        if ssh is not None:
            ssh_keys.give(ssh, instance.host, base_dir)
        with (
            open(job_dir / f"{instance.host}.console.log", "ab") as console,
            _this_thread_on(instance.cpus),
        ):
            process = subprocess.Popen(
                instance.argv,
                env=instance.env,
                cwd=base_dir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        processes.remember_child(process)
        identity = processes.identify(process.pid) or processes.ProcessId(process.pid, -1)
        _write_private(pid_file, json.dumps(asdict(identity)))

    def exists(self, job: JobRef) -> bool:
        return (self.jobs_dir / job.id).exists() or bool(processes.marked_processes(job.id))

    def describe(self, job: JobRef) -> dict[str, InstanceStatus] | None:
        job_dir = self.jobs_dir / job.id
        plan = self._load_plan(job_dir)
        if plan is None:
            return None
        statuses = self._statuses(job_dir, plan)
        if any(status.state == InstanceState.RUNNING for status in statuses.values()):
            self._keep_rules(plan)
        return statuses

    def _keep_rules(self, plan: LocalPlan) -> None:
        """The table of a running job with a way out, made again where it is gone: a
        firewall reload (``nft flush ruleset``, a firewall service restarting) takes
        every table, the job's rules with them, while the machine keeps forwarding its
        instances' traffic. One ``nft list tables`` a look, whatever the instances."""
        net = plan.network
        if net is None or net.egress is None or plan.job_id in egress.held_tables():
            return
        log.warning(
            "made the nftables table of %s again (%s): something removed it while the job "
            "ran, a firewall reload (nft flush ruleset) say",
            plan.job_name,
            net.egress.table,
        )
        network.apply_rules(net)

    def _statuses(self, job_dir: Path, plan: LocalPlan) -> dict[str, InstanceStatus]:
        statuses = {}
        for instance in plan.instances:
            leader = self._leader(job_dir, instance.host)
            if leader is None:
                statuses[instance.host] = InstanceStatus(
                    instance.host, InstanceState.UNKNOWN, cause=failure_causes.ended_cause(None)
                )
            elif processes.is_alive(leader):
                statuses[instance.host] = InstanceStatus(instance.host, InstanceState.RUNNING)
            else:
                exit_code = processes.child_exit_code(leader.pid)
                statuses[instance.host] = InstanceStatus(
                    instance.host,
                    InstanceState.EXITED,
                    exit_code=exit_code,
                    last_output=_tail(job_dir / f"{instance.host}.console.log"),
                    cause=failure_causes.ended_cause(exit_code),
                )
        return statuses

    def console(self, job: JobRef) -> dict[str, str]:
        job_dir = self.jobs_dir / job.id
        plan = self._load_plan(job_dir)
        return {
            instance.host: _tail_bytes(job_dir / f"{instance.host}.console.log", CONSOLE_BYTES)
            for instance in (plan.instances if plan else [])
        }

    def _cancel_existing(
        self, job: JobRef, *, force: bool, grace_seconds: float | None = None
    ) -> None:
        # The grace is the reconciler's to keep: it kills what is left once it has passed.
        sig = signal.SIGKILL if force else signal.SIGTERM
        job_dir = self.jobs_dir / job.id
        plan = self._load_plan(job_dir)
        for instance in plan.instances if plan else []:
            leader = self._leader(job_dir, instance.host)
            runtime = self._runtime(plan, leader)
            if not force and runtime is not None and processes.is_alive(runtime):
                # As a container runtime does: SIGTERM to the instance's runtime alone,
                # which passes it on to the scripts exactly once.
                processes.signal_process(runtime, signal.SIGTERM)
                continue
            # Killing, or the runtime is gone and no one else will pass it on: its group
            # gets the signal, and so does whatever left the group but carries the marker.
            if leader is not None:
                processes.signal_group(leader, sig, job.id)
            processes.signal_pids(processes.marked_processes(job.id, instance.host), sig)

    def teardown(self, job: JobRef) -> None:
        self.cancel(job, force=False)
        if not self._wait_until_gone(job, self.teardown_grace):
            self.cancel(job, force=True)
            if not self._wait_until_gone(job, KILL_WAIT_SECONDS):
                left = processes.marked_processes(job.id)
                raise TeardownError(f"processes of {job.name} survived SIGKILL: {left}")
        job_dir = self.jobs_dir / job.id
        plan = self._load_plan(job_dir)
        for instance in plan.instances if plan else []:
            leader = self._leader(job_dir, instance.host)
            if leader is not None:
                processes.forget_child(leader.pid)
        if plan is not None and plan.isolation == Isolation.CONTAINER:
            # An engine killed before its container ended leaves the container running.
            containers.remove_job(containers.find(self.container_engine)[0], job.id)
        if plan is not None and plan.network is not None:
            network.remove(plan.network)
        # Whatever of its network no plan names (one lost with the job's directory).
        network.remove_job(job.id)
        # A runtime killed with SIGKILL leaves its FastFile (FUSE) mounts behind, served by
        # no one: rmtree cannot enter them (ENOTCONN) and they would outlive the job.
        # Detach them first; a lazy unmount cannot fail on a mount still in use. (Those of
        # an instance with namespaces went with its mount namespace.)
        mounts.unmount_under(job_dir)
        shutil.rmtree(job_dir, ignore_errors=True)

    def held_jobs(self) -> list[JobRef]:
        """Every job with a directory here (a job's teardown removes it, so one of a job
        that has ended was left by a worker that died before its teardown ended), and
        every job whose network is left with no directory leading to it."""
        held: dict[str, JobRef] = {}
        if self.jobs_dir.is_dir():
            for job_dir in sorted(self.jobs_dir.iterdir()):
                if job_dir.is_dir():
                    plan = self._load_plan(job_dir)
                    held[job_dir.name] = JobRef(job_dir.name, plan.job_name if plan else "")
        for job_id in network.held_jobs():
            held.setdefault(job_id, JobRef(job_id, job_id))
        return [held[job_id] for job_id in sorted(held)]

    def _wait_until_gone(self, job: JobRef, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        job_dir = self.jobs_dir / job.id
        while True:
            # (Not ``describe``: a job being ended needs no rules made again.)
            plan = self._load_plan(job_dir)
            statuses = self._statuses(job_dir, plan) if plan is not None else {}
            running = any(s.state == InstanceState.RUNNING for s in statuses.values())
            if not running and not processes.marked_processes(job.id):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    # -- bookkeeping ------------------------------------------------------------------

    @staticmethod
    def _leader(job_dir: Path, host: str) -> processes.ProcessId | None:
        try:
            data = json.loads((job_dir / f"{host}.pid.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return processes.ProcessId(int(data["pid"]), int(data["start_ticks"]))

    @staticmethod
    def _runtime(
        plan: LocalPlan | None, leader: processes.ProcessId | None
    ) -> processes.ProcessId | None:
        """The instance's runtime: the leader itself, or under namespaces the leader's one
        child (unshare waits for it, and passes it no signal)."""
        if leader is None or plan is None or plan.isolation != Isolation.NAMESPACES:
            return leader
        children = [
            identity
            for pid in processes.children(leader.pid)
            if (identity := processes.identify(pid))
        ]
        return children[0] if children else None

    @staticmethod
    def _load_plan(job_dir: Path) -> LocalPlan | None:
        try:
            data = json.loads((job_dir / "plan.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        # A plan written before a field existed reads with the field's default.
        return json_records.read(LocalPlan, data)


def _on_image(request: LaunchRequest, image: str) -> LaunchRequest:
    """The request as its instances are launched: on ``image``, which may stand in for the
    one its spec names (stand_ins)."""
    chosen = request.spec.image
    if image == chosen.image:
        return request
    return replace(request, spec=replace(request.spec, image=replace(chosen, image=image)))


def _port(url: str) -> int | None:
    """The port of the API's URL, which the job's instances may reach on the machine."""
    parts = urlsplit(url)
    try:
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None


def _api_addresses(url: str) -> tuple[str, ...]:
    """Where the job's instances reach the API through their network: the IPv4 addresses
    of the service URL's host (``RUNYARD_PUBLIC_URL``), which their processes are given
    (``variables.SERVICE_URL``) and whose name their /etc/hosts resolves as the machine's
    does. (The runtime itself reports from the machine's own network, outside the job's.)
    None for loopback, which from inside an instance is its own."""
    host = urlsplit(url).hostname
    if not host:
        return ()
    try:
        found = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return ()
    addresses = dict.fromkeys(str(info[4][0]) for info in found)
    return tuple(a for a in addresses if not ipaddress.ip_address(a).is_loopback)


def _server_paths(images_root: Path) -> list[str]:
    """What an instance with namespaces sees read-only of the server: the environment it
    runs from, its code and the image store (the runtime adds its own interpreter's)."""
    paths = [sys.prefix, sys.base_prefix, str(images_root)]
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        paths += list(spec.submodule_search_locations or []) if spec else []
    return list(dict.fromkeys(paths))


def _public(plan: LocalPlan) -> dict[str, Any]:
    """The plan as a dry run shows it: the runtime's secrets and the credentials an
    instance inherits from the server (S3's, say) masked."""
    data = asdict(plan)
    for instance in data["instances"]:
        instance["env"] = variables.masked(instance["env"])
    return data


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(_tail_bytes(path, 8192).splitlines()[-lines:])


def _tail_bytes(path: Path, size: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - size))
            return handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
