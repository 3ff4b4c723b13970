"""The EC2 backend: one instance per host, launched by RunInstances, ended by termination.

``materialize`` builds the exact RunInstances arguments of each host, one call per host so
each has its own client token (``<job id>-<host>``): EC2 answers a repeated token with the
instance it already launched, so a retried task never launches twice. ``apply`` also looks
for instances tagged with the job and host before launching, which adopts them where the
token does not reach (an endpoint that ignores tokens, such as moto).

An instance's user-data (``userdata``) installs the runtime, writes the config files,
runs ``train`` and shuts the machine down; shutdown terminates it. Peer addresses are only
known after launch, so once every host has an instance ``apply`` tags each of them with all
the hosts' private addresses, which user-data reads from the instance metadata service.

A launch is all or nothing: if EC2 refuses any host (capacity, limits, configuration),
every instance of the job is terminated and the error names the instance type and EC2's
own code and words.
"""

from __future__ import annotations

import contextlib
import functools
import shlex
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from contract import variables
from contract.hosts import RENDEZVOUS_PORT, host_number
from contract.images import Catalog
from contract.layout import IMAGE_BASE_DIR
from contract.problems import Problem
from contract.spec import JobSpec
from provisioning.base import (
    CONSOLE_BYTES,
    REDACTED,
    Backend,
    InstanceState,
    InstanceStatus,
    JobRef,
    LaunchError,
    LaunchRequest,
    Materialized,
    ServerSettings,
    TeardownError,
    file_uri_path,
    is_loopback,
    unshared_file_uris,
)
from provisioning.catalog import CLUSTER_TYPES
from provisioning.ec2 import userdata
from provisioning.ec2.settings import Ec2Settings
from provisioning.instance_files import instance_files

JOB_ID_TAG = "runyard:job-id"
JOB_NAME_TAG = "runyard:job-name"
HOST_TAG = "runyard:host"
# Which start of the job launched the instance: a restart's instances are new ones, and
# the earlier attempt's, terminated, must not be taken for them.
ATTEMPT_TAG = "runyard:attempt"
# EC2 allows 50 tags per instance: the job's own five plus one address per host.
MAX_TAGS = 50
_BASE_TAGS = 5
# How much of an ended instance's console explains it in its status.
LAST_OUTPUT_LINES = 20
# The agent mpirun reaches the other instances through, run by the runtime's interpreter.
LAUNCH_AGENT_MODULE = "runtime.launch.remote_agent"

# EC2 instance state -> instance state. A state missing here reads as UNKNOWN.
EC2_STATES: dict[str, InstanceState] = {
    # Booting: the user-data (and so the runtime) has not started yet.
    "pending": InstanceState.PENDING,
    # The machine runs; whether the runtime does, its own reports tell.
    "running": InstanceState.RUNNING,
    # Shutting down or gone: nothing of the job runs there any more.
    "shutting-down": InstanceState.EXITED,
    "terminated": InstanceState.EXITED,
    # Stopped from outside Runyard (or a spot stop): user-data never runs again on a restart,
    # so the runtime is as gone as on a terminated instance.
    "stopping": InstanceState.EXITED,
    "stopped": InstanceState.EXITED,
}
# Every state but "terminated": an instance in one of these still exists for the job.
LIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")
# EC2's answers that mean "not this one" for instances EC2 may not show yet, or no longer.
_NOT_FOUND = "InvalidInstanceID.NotFound"
# How many terminated instances' consoles a worker process keeps (EC2 keeps 64 KiB each).
KEPT_CONSOLES = 256


# EC2's answers to RunInstances that mean "none to give now", not "never".
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacityOnHost",
        "InsufficientReservedInstanceCapacity",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
    }
)


class Ec2Error(LaunchError):
    """EC2 refused what a job needs; the message names the instance type and EC2's words."""


class ConsoleCache:
    """The consoles of terminated instances by id, the most recently used kept. A terminated
    instance's console never changes again, and the reconciler describes an ended instance
    on every pass until its job is torn down: GetConsoleOutput once, not every pass."""

    def __init__(self, size: int = KEPT_CONSOLES) -> None:
        self._size = size
        self._consoles: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, instance_id: str) -> str | None:
        with self._lock:
            console = self._consoles.get(instance_id)
            if console is not None:
                self._consoles.move_to_end(instance_id)
            return console

    def put(self, instance_id: str, console: str) -> None:
        with self._lock:
            self._consoles[instance_id] = console
            self._consoles.move_to_end(instance_id)
            while len(self._consoles) > self._size:
                self._consoles.popitem(last=False)


@dataclass(frozen=True)
class Ec2Instance:
    host: str
    # The keyword arguments of ``client.run_instances``, exactly as sent.
    run_instances: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ec2Plan:
    job_id: str
    job_name: str
    # The catalog's name (ml.p4d.24xlarge) and EC2's (p4d.24xlarge).
    instance_type: str
    ec2_type: str
    instances: list[Ec2Instance] = field(default_factory=list)
    attempt: int = 0


class Ec2Backend(Backend[Ec2Plan]):
    name = "ec2"
    instance_types = CLUSTER_TYPES

    def __init__(
        self,
        client: Any,
        settings: Ec2Settings,
        *,
        artifact_root: str,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        consoles: ConsoleCache | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        # A boto3 EC2 client, built by the caller: tests point it at a local moto server.
        self.client = client
        self.settings = settings
        self.artifact_root = artifact_root
        # A catalog image's packages are installed beside the runtime on each instance.
        self.catalog = catalog or Catalog()
        self.start_timeout = settings.start_timeout_seconds
        self._sleep = sleep
        self._clock = clock
        self._consoles = consoles if consoles is not None else ConsoleCache()

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> Ec2Backend:
        region, endpoint = settings.ec2.region, settings.ec2.endpoint_url
        return cls(
            _shared_client(region, endpoint),
            settings.ec2,
            artifact_root=settings.artifact_root,
            # The reconciler builds a backend every pass: the cache outlives them.
            consoles=_shared_consoles(region, endpoint),
            catalog=settings.catalog,
        )

    # -- planning ---------------------------------------------------------------------

    def materialize(self, request: LaunchRequest) -> Materialized[Ec2Plan]:
        spec = request.spec
        self._check(request)
        ec2_type = spec.instance_type.removeprefix("ml.")
        instances: list[Ec2Instance] = []
        public: list[dict[str, Any]] = []
        for host in request.hosts:
            secrets = (request.tokens[host], request.agent_key)
            args = self._run_instances_args(request, host, ec2_type, secrets)
            shown = self._run_instances_args(request, host, ec2_type, (REDACTED, REDACTED))
            shown["UserData"] = self._script(request, host, (REDACTED, REDACTED))
            instances.append(Ec2Instance(host, args))
            public.append({"host": host, "run_instances": shown})
        plan = Ec2Plan(
            request.job.id,
            request.job.name,
            spec.instance_type,
            ec2_type,
            instances,
            request.job.attempt,
        )
        summary = {
            "job_id": plan.job_id,
            "job_name": plan.job_name,
            "region": self.settings.region,
            "instances": public,
        }
        return Materialized(self.name, plan, summary)

    def check(self, spec: JobSpec, service_url: str) -> list[Problem]:
        return list(self._problems(spec, service_url))

    def _check(self, request: LaunchRequest) -> None:
        for problem in self._problems(request.spec, request.service_url):
            raise Ec2Error(problem.message)

    def _problems(self, spec: JobSpec, service_url: str) -> Iterator[Problem]:
        """What keeps a job from running on this server's EC2 setup, with the field to blame
        (``backend`` where it is the server's configuration)."""
        if spec.instance_type not in self.instance_types:
            yield Problem(
                ("instance_type",),
                f"instance type {spec.instance_type!r} is not an ml.* type of the catalog",
            )
        if not self.settings.image_id and not self.settings.launch_template:
            yield Problem(
                ("backend",),
                "set RUNYARD_EC2__IMAGE_ID or RUNYARD_EC2__LAUNCH_TEMPLATE to run on EC2",
            )
        if spec.image.container is not None:
            yield Problem(
                ("image_uri",),
                f"{spec.image.container[:120]!r} is a container image, which EC2 instances do "
                "not run; name an image of the catalog, or run it on the kubernetes backend",
            )
        if not self.settings.runtime_package:
            yield Problem(
                ("backend",),
                "set RUNYARD_EC2__RUNTIME_PACKAGE to what pip installs the runtime from on "
                "the instances (the URL of this release's runyard wheel, say) to run on EC2",
            )
        if self.settings.artifact_nfs and not self.artifact_root.startswith("file://"):
            yield Problem(
                ("backend",),
                "RUNYARD_EC2__ARTIFACT_NFS needs a file:// RUNYARD_ARTIFACT_ROOT",
            )
        if _BASE_TAGS + spec.instance_count > MAX_TAGS:
            most = MAX_TAGS - _BASE_TAGS
            yield Problem(("instance_count",), f"at most {most} EC2 instances per job")
        if is_loopback(service_url):
            yield Problem(
                ("backend",),
                f"EC2 instances cannot report to {service_url}: "
                "set RUNYARD_PUBLIC_URL to an address they can reach",
            )
        shared = self.artifact_root if self.settings.artifact_nfs else None
        unreadable = unshared_file_uris(spec, shared)
        if unreadable:
            names = ", ".join(".".join(str(part) for part in loc) for loc in unreadable)
            yield Problem(
                unreadable[0],
                f"EC2 instances cannot read the file:// URIs of {names}: use "
                "s3://, or share RUNYARD_ARTIFACT_ROOT with RUNYARD_EC2__ARTIFACT_NFS",
            )

    def _run_instances_args(
        self, request: LaunchRequest, host: str, ec2_type: str, secrets: tuple[str, str]
    ) -> dict[str, Any]:
        settings = self.settings
        user_data = userdata.compress(self._script(request, host, secrets))
        if len(user_data) > userdata.USER_DATA_LIMIT:
            raise Ec2Error(
                f"the user-data of {host} is {len(user_data)} bytes compressed, over EC2's "
                f"{userdata.USER_DATA_LIMIT}: fewer or shorter hyperparameters or environment"
            )
        args: dict[str, Any] = {
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": client_token(request.job.id, host, request.job.attempt),
            "InstanceType": ec2_type,
        }
        if settings.image_id:
            args["ImageId"] = settings.image_id
        if settings.launch_template:
            key = (
                "LaunchTemplateId"
                if settings.launch_template.startswith("lt-")
                else "LaunchTemplateName"
            )
            args["LaunchTemplate"] = {key: settings.launch_template}
        if settings.subnet_id:
            args["SubnetId"] = settings.subnet_id
        if settings.security_group_ids:
            args["SecurityGroupIds"] = list(settings.security_group_ids)
        if settings.iam_instance_profile:
            key = "Arn" if settings.iam_instance_profile.startswith("arn:") else "Name"
            args["IamInstanceProfile"] = {key: settings.iam_instance_profile}
        if settings.key_name:
            args["KeyName"] = settings.key_name
        args["UserData"] = user_data
        args["InstanceInitiatedShutdownBehavior"] = "terminate"
        # IMDSv2 only, with the instance's tags readable there: how user-data learns its peers.
        args["MetadataOptions"] = {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "InstanceMetadataTags": "enabled",
        }
        args["BlockDeviceMappings"] = [
            {
                "DeviceName": settings.root_device_name,
                "Ebs": {
                    "VolumeSize": request.spec.volume_size,
                    "VolumeType": settings.volume_type,
                    "DeleteOnTermination": True,
                },
            }
        ]
        tags = [
            {"Key": "Name", "Value": f"{request.job.name}-{host}"},
            {"Key": JOB_NAME_TAG, "Value": request.job.name},
            {"Key": JOB_ID_TAG, "Value": request.job.id},
            {"Key": HOST_TAG, "Value": host},
            {"Key": ATTEMPT_TAG, "Value": str(request.job.attempt)},
        ]
        args["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": [dict(tag) for tag in tags]},
        ]
        if request.spec.use_spot_instances:
            args["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
        return args

    def _script(self, request: LaunchRequest, host: str, secrets: tuple[str, str]) -> str:
        """The instance's boot script; ``secrets``: its token and the job's agent key."""
        token, agent_key = secrets
        settings = self.settings
        python = f"{userdata.Layout().venv}/bin/python3"
        files = instance_files(
            request,
            host,
            # Names, not addresses: user-data makes them resolve (see userdata).
            host_addresses={name: name for name in request.hosts},
            master_port=RENDEZVOUS_PORT,
            network_interface=settings.network_interface,
            launch_agent=[python, "-m", LAUNCH_AGENT_MODULE],
            agent_port=settings.agent_port,
            # On spot, the runtime watches for EC2's two-minute interruption warning.
            spot_notice="ec2" if request.spec.use_spot_instances else None,
        )
        env = variables.instance_environment(
            base_dir=IMAGE_BASE_DIR,
            service_url=request.service_url,
            job_name=request.job.name,
            job_id=request.job.id,
            host=host,
            token=token,
            agent_key=agent_key,
        )
        boot = userdata.Bootstrap(
            job_name=request.job.name,
            host=host,
            hosts=request.hosts,
            python=settings.python,
            # Set: _problems refuses a plan without it before any script is written. A
            # catalog image's packages come with it: the instance's environment is the image.
            pip_args=[*shlex.split(settings.runtime_package or ""), *self._image_packages(request)],
            files=files,
            env=env,
            address_wait_seconds=settings.address_wait_seconds,
            nfs_export=settings.artifact_nfs,
            nfs_path=file_uri_path(self.artifact_root) if settings.artifact_nfs else None,
        )
        return userdata.render(boot)

    def _image_packages(self, request: LaunchRequest) -> list[str]:
        image = self.catalog.get(request.spec.image.image)
        return list(image.packages) if image is not None else []

    # -- side effects -----------------------------------------------------------------

    def apply(self, materialized: Materialized[Ec2Plan]) -> None:
        plan = materialized.plan
        launched: dict[str, dict[str, Any]] = {}
        try:
            existing = _by_host(self._instances(plan.job_id, attempt=plan.attempt))
            for instance in plan.instances:
                # Adopt what an earlier attempt launched, in whatever state, as EC2 itself
                # does for a repeated client token.
                found = existing.get(instance.host)
                launched[instance.host] = found or self._run(instance)
            self._publish_addresses(plan, launched)
        except Exception as exc:
            ids = [item["InstanceId"] for item in launched.values()]
            cleanup = self._abandon(plan.job_id, ids)
            failed = next((i.host for i in plan.instances if i.host not in launched), None)
            raise Ec2Error(
                _launch_failure(plan, failed, exc, cleanup), capacity=_out_of_capacity(exc)
            ) from exc

    def _run(self, instance: Ec2Instance) -> dict[str, Any]:
        response = self.client.run_instances(**instance.run_instances)
        created: dict[str, Any] = response["Instances"][0]
        return created

    def _publish_addresses(self, plan: Ec2Plan, launched: dict[str, dict[str, Any]]) -> None:
        # Only instances still starting or running wait for their peers; one adopted after
        # it ended has lost its address, and its host reads as exited to the reconciler.
        waiting = {
            host: instance
            for host, instance in launched.items()
            if instance.get("State", {}).get("Name") in ("pending", "running")
        }
        tags = []
        for host, instance in launched.items():
            address = instance.get("PrivateIpAddress")
            if address:
                tags.append({"Key": f"{userdata.ADDRESS_TAG_PREFIX}{host}", "Value": address})
            elif host in waiting:
                raise Ec2Error(f"{instance['InstanceId']} ({host}) has no private address")
        if not waiting:
            return
        ids = [instance["InstanceId"] for instance in waiting.values()]
        # An instance just launched may not be visible to CreateTags for a moment.
        self._retry_not_found(lambda: self.client.create_tags(Resources=ids, Tags=tags))

    def _abandon(self, job_id: str, launched: list[str]) -> str:
        """End every instance of a job whose launch failed; say what became of them."""
        try:
            ids = sorted(
                set(launched) | {i["InstanceId"] for i in self._instances(job_id, LIVE_STATES)}
            )
            self._terminate(ids)
        except Exception as exc:
            return f"could not terminate the job's instances ({type(exc).__name__}: {exc})"
        if not ids:
            return "no instance was left running"
        return f"terminated the job's {len(ids)} launched instance(s): {', '.join(ids)}"

    def exists(self, job: JobRef) -> bool:
        return bool(self._instances(job.id, LIVE_STATES))

    def describe(self, job: JobRef) -> dict[str, InstanceStatus] | None:
        instances = _by_host(self._instances(job.id, attempt=job.attempt))
        if not instances:
            return None
        return {host: self._status(host, instance) for host, instance in instances.items()}

    def _status(self, host: str, instance: dict[str, Any]) -> InstanceStatus:
        state = instance_state(instance)
        last_output = ""
        if state == InstanceState.EXITED:
            tail = self._console(instance).splitlines()[-LAST_OUTPUT_LINES:]
            last_output = "\n".join(tail)
        return InstanceStatus(host, state, last_output=last_output, reason=_reason(instance))

    def console(self, job: JobRef) -> dict[str, str]:
        return {
            host: self._console(instance)[-CONSOLE_BYTES:]
            for host, instance in _by_host(self._instances(job.id, attempt=job.attempt)).items()
        }

    def _console(self, instance: dict[str, Any]) -> str:
        """The instance's serial console (EC2 keeps its last 64 KiB), where cloud-init
        echoes everything user-data and the runtime print."""
        from botocore.exceptions import ClientError

        instance_id = instance["InstanceId"]
        terminated = instance.get("State", {}).get("Name") == "terminated"
        if terminated and (kept := self._consoles.get(instance_id)) is not None:
            return kept
        try:
            output = self.client.get_console_output(InstanceId=instance_id).get("Output")
        except ClientError:
            return ""  # gone for good, or not allowed: the state and reason still tell
        console = str(output or "")
        if terminated:
            self._consoles.put(instance_id, console)
        return console

    def _cancel_existing(
        self, job: JobRef, *, force: bool, grace_seconds: float | None = None
    ) -> None:
        # EC2 has no SIGTERM to send, nor a grace to give; termination shuts the OS down,
        # whose service manager signals the processes first. A gentler stop would run
        # `kill -TERM` on the runtime through SSM Run Command, which needs the SSM agent and
        # an instance role.
        self._terminate([i["InstanceId"] for i in self._instances(job.id, LIVE_STATES)])

    def teardown(self, job: JobRef) -> None:
        deadline = self._clock() + self.settings.teardown_timeout_seconds
        while True:
            live = self._instances(job.id, LIVE_STATES)
            if not live:
                return
            # Shutting down already: asking again changes nothing.
            self._terminate(
                [i["InstanceId"] for i in live if i["State"]["Name"] != "shutting-down"]
            )
            if self._clock() >= deadline:
                left = ", ".join(f"{i['InstanceId']} ({i['State']['Name']})" for i in live)
                raise TeardownError(
                    f"EC2 instances of {job.name} not terminated after "
                    f"{self.settings.teardown_timeout_seconds:g} s: {left}"
                )
            self._sleep(self.settings.poll_interval_seconds)

    def held_jobs(self) -> list[JobRef]:
        filters = [
            {"Name": "tag-key", "Values": [JOB_ID_TAG]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        jobs = set()
        for instance in self._describe(filters):
            tags = _tags(instance)
            jobs.add(JobRef(tags[JOB_ID_TAG], tags.get(JOB_NAME_TAG, "")))
        return sorted(jobs, key=lambda job: (job.name, job.id))

    # -- EC2 calls ----------------------------------------------------------------------

    def _instances(
        self, job_id: str, states: tuple[str, ...] = (), *, attempt: int | None = None
    ) -> list[dict[str, Any]]:
        """The job's instances (in ``states``, of ``attempt``; of every attempt when None,
        as teardown wants)."""
        filters = [{"Name": f"tag:{JOB_ID_TAG}", "Values": [job_id]}]
        if attempt is not None:
            filters.append({"Name": f"tag:{ATTEMPT_TAG}", "Values": [str(attempt)]})
        if states:
            filters.append({"Name": "instance-state-name", "Values": list(states)})
        return list(self._describe(filters))

    def _describe(self, filters: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        pages = self.client.get_paginator("describe_instances").paginate(Filters=filters)
        for page in pages:
            for reservation in page["Reservations"]:
                yield from reservation["Instances"]

    def _terminate(self, ids: list[str]) -> None:
        if not ids:
            return
        from botocore.exceptions import ClientError

        try:
            self.client.terminate_instances(InstanceIds=ids)
        except ClientError as exc:
            if _code(exc) != _NOT_FOUND:
                raise
            # One unknown id fails the whole call: end the others one by one.
            for instance_id in ids:
                with contextlib.suppress(ClientError):
                    self.client.terminate_instances(InstanceIds=[instance_id])

    def _retry_not_found(self, call: Callable[[], object], attempts: int = 5) -> None:
        from botocore.exceptions import ClientError

        for attempt in range(attempts):
            try:
                call()
                return
            except ClientError as exc:
                if _code(exc) != _NOT_FOUND or attempt == attempts - 1:
                    raise
                self._sleep(0.5 * 2**attempt)


def client_token(job_id: str, host: str, attempt: int = 0) -> str:
    """RunInstances' idempotency token: one per job, attempt and host, at most 64
    characters. EC2 answers a repeated token with the instance it launched for it, even
    terminated, so a restart needs tokens of its own."""
    token = f"{job_id}-{host}" if attempt == 0 else f"{job_id}-{attempt}-{host}"
    return token[-64:]


def instance_state(instance: dict[str, Any]) -> InstanceState:
    return EC2_STATES.get(str(instance.get("State", {}).get("Name", "")), InstanceState.UNKNOWN)


@functools.lru_cache(maxsize=4)
def _shared_consoles(region: str, endpoint_url: str | None) -> ConsoleCache:
    """One console cache per endpoint and process, as the client is."""
    return ConsoleCache()


@functools.lru_cache(maxsize=4)
def _shared_client(region: str, endpoint_url: str | None) -> Any:
    """One client per endpoint and process: building one loads EC2's whole API model."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard"}, user_agent_extra="runyard")
    session = boto3.session.Session()
    return session.client("ec2", region_name=region, endpoint_url=endpoint_url, config=config)


def _by_host(instances: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each host's instance: a live one before a terminated one, then the newest."""
    chosen: dict[str, dict[str, Any]] = {}
    for instance in instances:
        host = _tags(instance).get(HOST_TAG)
        if host is None:
            continue
        current = chosen.get(host)
        if current is None or _rank(instance) > _rank(current):
            chosen[host] = instance
    return dict(sorted(chosen.items(), key=lambda item: host_number(item[0])))


def _rank(instance: dict[str, Any]) -> tuple[bool, str]:
    live = instance.get("State", {}).get("Name") != "terminated"
    return live, str(instance.get("LaunchTime", ""))


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in instance.get("Tags", [])}


def _reason(instance: dict[str, Any]) -> str:
    """EC2's words for the state: the state reason's message, else the transition reason."""
    message = str(instance.get("StateReason", {}).get("Message") or "")
    return message or str(instance.get("StateTransitionReason") or "")


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _out_of_capacity(exc: Exception) -> bool:
    response = getattr(exc, "response", None) or {}
    return response.get("Error", {}).get("Code") in CAPACITY_ERRORS


def _launch_failure(plan: Ec2Plan, host: str | None, exc: Exception, cleanup: str) -> str:
    what = f"{host} of {plan.job_name}" if host else plan.job_name
    response = getattr(exc, "response", None)
    if response is not None:
        error = response.get("Error", {})
        cause = f"{error.get('Code', 'Error')}: {error.get('Message', '')}".rstrip(": ")
    else:
        cause = f"{type(exc).__name__}: {exc}"
    return (
        f"EC2 could not launch {what} as {plan.ec2_type} ({plan.instance_type}): {cause}; {cleanup}"
    )
