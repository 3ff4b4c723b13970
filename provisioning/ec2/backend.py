"""The EC2 backend: one instance per host, launched by RunInstances, ended by termination.

``materialize`` is the pure plan (``plan``): one RunInstances call per host, each with a
client token of its own, so a retried task never launches twice. ``apply`` also looks for
instances tagged with the job and host before launching, which adopts them where the token
does not reach (an endpoint that ignores tokens, such as moto).

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
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from contract.hosts import host_number
from contract.images import Catalog
from contract.problems import Problem
from contract.spec import JobSpec
from provisioning.base import (
    CONSOLE_BYTES,
    Backend,
    InstanceState,
    InstanceStatus,
    JobRef,
    LaunchRequest,
    Materialized,
    ServerSettings,
    TeardownError,
    own_settings,
)
from provisioning.catalog import InstanceCatalog
from provisioning.ec2 import failure_causes, userdata
from provisioning.ec2.plan import (
    ATTEMPT_TAG,
    HOST_TAG,
    JOB_ID_TAG,
    JOB_NAME_TAG,
    Ec2Error,
    Ec2Instance,
    Ec2Plan,
    Planner,
)
from provisioning.ec2.settings import Ec2Settings

# How much of an ended instance's console explains it in its status.
LAST_OUTPUT_LINES = 20

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


class Ec2Backend(Backend[Ec2Plan]):
    name = "ec2"

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
        instance_catalog: InstanceCatalog | None = None,
    ) -> None:
        # A boto3 EC2 client, built by the caller: tests point it at a local moto server.
        self.client = client
        self.settings = settings
        self._planner = Planner(
            settings, artifact_root, catalog or Catalog(), instance_catalog or InstanceCatalog()
        )
        self.start_timeout = settings.start_timeout_seconds
        self._sleep = sleep
        self._clock = clock
        self._consoles = consoles if consoles is not None else ConsoleCache()

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> Ec2Backend:
        own = own_settings(settings, cls.name, Ec2Settings)
        region, endpoint = own.region, own.endpoint_url
        return cls(
            _shared_client(region, endpoint),
            own,
            artifact_root=settings.artifact_root,
            # The reconciler builds a backend every pass: the cache outlives them.
            consoles=_shared_consoles(region, endpoint),
            catalog=settings.catalog,
            instance_catalog=settings.instance_catalog,
        )

    # -- planning ---------------------------------------------------------------------

    def materialize(self, request: LaunchRequest) -> Materialized[Ec2Plan]:
        plan, summary = self._planner.plan(request)
        return Materialized(self.name, plan, summary)

    def check(self, spec: JobSpec, service_url: str) -> list[Problem]:
        return list(self._planner.problems(spec, service_url))

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
        ended = state in (InstanceState.EXITED, InstanceState.UNKNOWN)
        return InstanceStatus(
            host,
            state,
            last_output=last_output,
            reason=_reason(instance),
            cause=failure_causes.ended_cause(instance) if ended else None,
        )

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
