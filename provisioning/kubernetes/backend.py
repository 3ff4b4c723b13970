"""The Kubernetes backend: one pod per instance, created and observed with the official client.

``materialize`` builds the manifests (``manifests``) and is what a dry run shows;
``apply`` creates them root first, adopting any that an earlier attempt created. Status comes
from pod phases through one table; a pod that waits for a node carries the scheduler's own
words as its reason, and one that ended its cause as well (``failure_causes``' tables).
Teardown deletes every object by name (the owner references let the cluster's garbage
collector do the same should Runyard die halfway) and waits until none is left.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contract.failure_causes import FailureCause
from contract.hosts import RENDEZVOUS_PORT, host_number
from contract.problems import Problem
from contract.spec import JobSpec
from provisioning.base import (
    CONSOLE_BYTES,
    KILL_WAIT_SECONDS,
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
    is_loopback,
    own_settings,
    unshared_file_uris,
)
from provisioning.catalog import InstanceCatalog
from provisioning.kubernetes import failure_causes, manifests
from provisioning.kubernetes.client import shared_client
from provisioning.kubernetes.settings import KubernetesSettings

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

VOLCANO = ("scheduling.volcano.sh", "v1beta1", "podgroups")

# Pod phase -> instance state. A phase missing here (a newer Kubernetes) reads as UNKNOWN.
POD_STATES: dict[str, InstanceState] = {
    "Pending": InstanceState.PENDING,
    "Running": InstanceState.RUNNING,
    "Succeeded": InstanceState.EXITED,
    "Failed": InstanceState.EXITED,
    "Unknown": InstanceState.UNKNOWN,
}
# Waiting reasons that are the normal course of starting a container, not news.
_ROUTINE_WAITING = frozenset({"ContainerCreating", "PodInitializing"})
# A pod's console is the end of its log: this many lines, fetched with a cap on bytes (the
# kubelet cuts after tailing, so a cap alone would keep the log's start), then CONSOLE_BYTES
# of it kept.
CONSOLE_LINES = 2000
_CONSOLE_FETCH_BYTES = 4 * CONSOLE_BYTES


class KubernetesError(LaunchError):
    """The cluster refused an operation; the message names the object and the cause."""


@dataclass(frozen=True)
class KubernetesPlan:
    job_id: str
    job_name: str
    namespace: str
    base: str
    objects: list[dict[str, Any]] = field(default_factory=list)


class KubernetesBackend(Backend[KubernetesPlan]):
    name = "kubernetes"

    def __init__(
        self,
        api_client: Callable[[], ApiClient],
        settings: KubernetesSettings,
        *,
        artifact_root: str,
        stop_grace: float = 30.0,
        spot_grace: float = 110.0,
        teardown_grace: float = 5.0,
        poll_interval: float = 0.2,
        kill_wait: float = KILL_WAIT_SECONDS,
        instance_catalog: InstanceCatalog | None = None,
    ) -> None:
        # A factory: planning (a dry run) must work where no cluster is reachable.
        self._api_client = api_client
        self.settings = settings
        self.instance_catalog = instance_catalog or InstanceCatalog()
        self.namespace = settings.namespace
        self.artifact_root = artifact_root
        self.stop_grace = stop_grace
        self.spot_grace = spot_grace
        self.teardown_grace = teardown_grace
        self.poll_interval = poll_interval
        self.kill_wait = kill_wait
        self.start_timeout = (
            settings.schedule_timeout_seconds if settings.on_unschedulable == "fail" else None
        )

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> KubernetesBackend:
        own = own_settings(settings, cls.name, KubernetesSettings)
        return cls(
            functools.partial(shared_client, own.model_dump_json()),
            own,
            artifact_root=settings.artifact_root,
            stop_grace=settings.stop_grace_seconds,
            spot_grace=settings.spot_grace_seconds,
            teardown_grace=settings.teardown_grace_seconds,
            instance_catalog=settings.instance_catalog,
        )

    # -- planning ---------------------------------------------------------------------

    def check(self, spec: JobSpec, service_url: str) -> list[Problem]:
        problems = []
        if is_loopback(service_url):
            message = (
                f"pods cannot report to {service_url}: "
                "set RUNYARD_PUBLIC_URL to an address they can reach"
            )
            problems.append(Problem(("backend",), message))
        shared = self.artifact_root if self.settings.artifact_volume_claim else None
        unreadable = unshared_file_uris(spec, shared)
        if unreadable:
            fix = (
                "keep them under RUNYARD_ARTIFACT_ROOT, which the pods mount"
                if shared
                else "set RUNYARD_KUBERNETES__ARTIFACT_VOLUME_CLAIM to a volume holding "
                "RUNYARD_ARTIFACT_ROOT, so the pods see the same paths"
            )
            problems.append(Problem(unreadable[0], f"pods cannot read this file:// URI: {fix}"))
        return problems

    def materialize(self, request: LaunchRequest) -> Materialized[KubernetesPlan]:
        instance_type = self.instance_catalog.get(request.spec.instance_type)
        if instance_type is None:
            # Accepted once, and taken out of RUNYARD_INSTANCE_TYPES since.
            raise KubernetesError(
                f"instance type {request.spec.instance_type!r} is no longer in this "
                "server's catalog (RUNYARD_INSTANCE_TYPES)"
            )
        objects = manifests.build(
            request,
            self.settings,
            instance_type=instance_type,
            artifact_root=self.artifact_root,
            master_port=RENDEZVOUS_PORT,
            grace_seconds=max(self.stop_grace, self.spot_grace),
        )
        base = manifests.base_name(request.job.name, request.job.id)
        plan = KubernetesPlan(request.job.id, request.job.name, self.namespace, base, objects)
        return Materialized(self.name, plan, {"manifests": [_redacted(o) for o in objects]})

    # -- side effects -----------------------------------------------------------------

    def apply(self, materialized: Materialized[KubernetesPlan]) -> None:
        plan = materialized.plan
        root, *owned = plan.objects
        uid = self._create_root(plan, root)
        for manifest in owned:
            body = copy.deepcopy(manifest)
            for reference in body["metadata"].get("ownerReferences", []):
                reference["uid"] = uid
            self._create(body)

    def _create_root(self, plan: KubernetesPlan, root: dict[str, Any]) -> str:
        core = self._core()
        from kubernetes.client.exceptions import ApiException

        try:
            created = core.create_namespaced_config_map(self.namespace, root)
        except ApiException as exc:
            if exc.status != 409:
                raise _refused("create", root, exc) from exc
            # An earlier attempt created it: adopt it, if it really is this job's.
            created = core.read_namespaced_config_map(plan.base, self.namespace)
            owner = (created.metadata.labels or {}).get(manifests.LABEL_JOB_ID)
            if owner != plan.job_id:
                raise KubernetesError(
                    f"ConfigMap {self.namespace}/{plan.base} belongs to job {owner!r}, "
                    f"not {plan.job_id!r}"
                ) from exc
        uid: str = created.metadata.uid
        return uid

    def _create(self, manifest: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        core, kind = self._core(), manifest["kind"]
        try:
            if kind == "Secret":
                core.create_namespaced_secret(self.namespace, manifest)
            elif kind == "Service":
                core.create_namespaced_service(self.namespace, manifest)
            elif kind == "Pod":
                core.create_namespaced_pod(self.namespace, manifest)
            elif kind == "PodGroup":
                self._custom().create_namespaced_custom_object(
                    VOLCANO[0], VOLCANO[1], self.namespace, VOLCANO[2], manifest
                )
            else:
                raise KubernetesError(f"no way to create a {kind}")
        except ApiException as exc:
            if exc.status != 409:  # 409: created by an earlier attempt, adopted
                raise _refused("create", manifest, exc) from exc

    def exists(self, job: JobRef) -> bool:
        return self._root(job) is not None or bool(self._pods(job))

    def describe(self, job: JobRef) -> dict[str, InstanceStatus] | None:
        root = self._root(job)
        pods = self._pods(job)
        if root is None and not pods:
            return None
        hosts = _hosts(root) if root is not None else sorted(pods, key=host_number)
        base = manifests.base_name(job.name, job.id)
        statuses = {}
        for host in hosts:
            pod = pods.get(host)
            if pod is None:
                reason = f"pod {manifests.pod_name(base, host)} is gone"
                statuses[host] = InstanceStatus(
                    host, InstanceState.UNKNOWN, reason=reason, cause=FailureCause.INSTANCE_LOST
                )
            else:
                statuses[host] = self._status(host, pod)
        return statuses

    def _status(self, host: str, pod: Any) -> InstanceStatus:
        phase = pod.status.phase if pod.status else None
        state = POD_STATES.get(phase or "", InstanceState.UNKNOWN)
        if phase is None:  # just created: not even the scheduler has seen it
            state = InstanceState.PENDING
        if state == InstanceState.PENDING:
            return self._pending_status(host, pod)
        if state != InstanceState.EXITED:
            return InstanceStatus(host, state)
        terminated = _terminated(pod)
        exit_code = terminated.exit_code if terminated is not None else None
        why = [
            part
            for part in (
                terminated.reason if terminated is not None else None,
                terminated.message if terminated is not None else None,
                pod.status.reason,
                pod.status.message,
            )
            if part
        ]
        return InstanceStatus(
            host,
            state,
            exit_code=exit_code,
            last_output=self._log_tail(pod.metadata.name),
            reason=": ".join(why),
            cause=failure_causes.ended_cause(
                pod.status.reason, terminated.reason if terminated is not None else None
            ),
        )

    def _pending_status(self, host: str, pod: Any) -> InstanceStatus:
        waiting = _waiting(pod)
        if waiting is not None and waiting.reason in failure_causes.WAITING_CAUSES:
            # The container will never start as the pod stands, though the pod stays
            # Pending: the instance has ended, with that reason.
            reason = ": ".join(part for part in (waiting.reason, waiting.message) if part)
            cause = failure_causes.WAITING_CAUSES[waiting.reason]
            return InstanceStatus(host, InstanceState.EXITED, reason=reason, cause=cause)
        # Scheduled and only starting: pulling the image, mounting volumes. A pull that
        # fails (ErrImagePull, ImagePullBackOff) is news, and counts as waiting again.
        starting = _scheduled(pod) and (waiting is None or waiting.reason in _ROUTINE_WAITING)
        return InstanceStatus(
            host, InstanceState.PENDING, reason=self._pending_reason(pod), starting=starting
        )

    def _pending_reason(self, pod: Any) -> str:
        """Why a pod waits, from its conditions, its container, or its latest warning."""
        status = pod.status
        for condition in (status.conditions if status else None) or []:
            if condition.type == "PodScheduled" and condition.status == "False":
                return f"{condition.reason or 'Unschedulable'}: {condition.message or ''}".strip()
        for container in (status.container_statuses if status else None) or []:
            waiting = container.state.waiting if container.state else None
            if waiting is not None and waiting.reason not in _ROUTINE_WAITING:
                return f"{waiting.reason}: {waiting.message or ''}".strip()
        return self._latest_warning(pod.metadata.name)

    def _latest_warning(self, pod_name: str) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            events = (
                self._core()
                .list_namespaced_event(
                    self.namespace, field_selector=f"involvedObject.name={pod_name}"
                )
                .items
            )
        except ApiException:
            return ""  # events are a courtesy; a cluster may not let us read them
        warnings = [
            event
            for event in events
            if event.type == "Warning" and event.involved_object.name == pod_name
        ]
        if not warnings:
            return ""
        latest = max(warnings, key=lambda event: _event_time(event))
        return f"{latest.reason}: {latest.message or ''}".strip()

    def _log_tail(self, pod_name: str, lines: int = 20) -> str:
        return self._log(pod_name, tail_lines=lines)

    def _log(self, pod_name: str, **limits: int) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            text: str = self._core().read_namespaced_pod_log(
                pod_name, self.namespace, container="runtime", **limits
            )
        except ApiException:
            return ""  # not started yet, or its node is gone: there is nothing to read
        return text

    def console(self, job: JobRef) -> dict[str, str]:
        return {
            host: self._log(
                pod.metadata.name, tail_lines=CONSOLE_LINES, limit_bytes=_CONSOLE_FETCH_BYTES
            )[-CONSOLE_BYTES:]
            for host, pod in self._pods(job).items()
        }

    def _cancel_existing(
        self, job: JobRef, *, force: bool, grace_seconds: float | None = None
    ) -> None:
        # Kubernetes stops a container by deleting its pod: SIGTERM now, SIGKILL after the
        # grace given here (the pod's own is the longest of all, for evictions), or at once
        # with grace 0.
        grace = 0 if force else self._grace(grace_seconds)
        for pod in self._pods(job).values():
            self._delete("Pod", pod.metadata.name, grace=grace)

    def _grace(self, seconds: float | None) -> int:
        return math.ceil(self.stop_grace if seconds is None else seconds)

    def teardown(self, job: JobRef) -> None:
        base = manifests.base_name(job.name, job.id)
        # The stop grace, as long as teardown waits; a pod still in a longer grace (an
        # interruption's) has had it by now, and a second delete only shortens it.
        self._delete_all(job, base, grace=self._grace(None))
        if not self._wait_until_gone(job, self.teardown_grace + self.stop_grace):
            self._delete_all(job, base, grace=0)
            if not self._wait_until_gone(job, self.kill_wait):
                left = sorted(pod.metadata.name for pod in self._pods(job).values())
                raise TeardownError(f"objects of {job.name} survived deletion: {left}")

    def _delete_all(self, job: JobRef, base: str, *, grace: int | None) -> None:
        for pod in self._pods(job).values():
            self._delete("Pod", pod.metadata.name, grace=grace)
        for kind, name in (
            ("Service", base),
            ("Secret", f"{base}-token"),
            ("PodGroup", base),
            ("ConfigMap", base),
        ):
            if kind != "PodGroup" or self.settings.gang_scheduler == "volcano":
                self._delete(kind, name, grace=grace)

    def _delete(self, kind: str, name: str, *, grace: int | None) -> None:
        from kubernetes.client.exceptions import ApiException

        core, namespace = self._core(), self.namespace
        # Background: the collector removes what the object owns without holding it up.
        options = {"grace_period_seconds": grace, "propagation_policy": "Background"}
        try:
            if kind == "Pod":
                core.delete_namespaced_pod(name, namespace, **options)
            elif kind == "Service":
                core.delete_namespaced_service(name, namespace, **options)
            elif kind == "Secret":
                core.delete_namespaced_secret(name, namespace, **options)
            elif kind == "ConfigMap":
                core.delete_namespaced_config_map(name, namespace, **options)
            else:
                group, version, plural = VOLCANO
                self._custom().delete_namespaced_custom_object(
                    group, version, namespace, plural, name, **options
                )
        except ApiException as exc:
            if exc.status != 404:
                raise _refused("delete", {"kind": kind, "metadata": {"name": name}}, exc) from exc

    def _wait_until_gone(self, job: JobRef, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if not self.exists(job):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_interval)

    def held_jobs(self) -> list[JobRef]:
        core = self._core()
        selector = manifests.LABEL_JOB_ID
        found: dict[str, JobRef] = {}
        for listing in (
            core.list_namespaced_config_map(self.namespace, label_selector=selector),
            core.list_namespaced_pod(self.namespace, label_selector=selector),
        ):
            for item in listing.items:
                labels = item.metadata.labels or {}
                if manifests.LABEL_JOB_ID in labels and manifests.LABEL_JOB_NAME in labels:
                    job_id = labels[manifests.LABEL_JOB_ID]
                    found[job_id] = JobRef(job_id, labels[manifests.LABEL_JOB_NAME])
        return sorted(found.values(), key=lambda ref: ref.name)

    # -- reading ----------------------------------------------------------------------

    def _root(self, job: JobRef) -> Any:
        from kubernetes.client.exceptions import ApiException

        base = manifests.base_name(job.name, job.id)
        try:
            root = self._core().read_namespaced_config_map(base, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _refused("read", {"kind": "ConfigMap", "metadata": {"name": base}}, exc) from exc
        labels = root.metadata.labels or {}
        return root if labels.get(manifests.LABEL_JOB_ID) == job.id else None

    def _pods(self, job: JobRef) -> dict[str, Any]:
        """The job's pods by host. Filtered here too, not only by the server's selector:
        a pod of another job must never be taken for one of this job's."""
        listing = self._core().list_namespaced_pod(
            self.namespace, label_selector=f"{manifests.LABEL_JOB_ID}={job.id}"
        )
        pods = {}
        for pod in listing.items:
            labels = pod.metadata.labels or {}
            if labels.get(manifests.LABEL_JOB_ID) == job.id and manifests.LABEL_HOST in labels:
                pods[labels[manifests.LABEL_HOST]] = pod
        return pods

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._api_client())

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._api_client())


def _refused(action: str, manifest: dict[str, Any], exc: Any) -> KubernetesError:
    reason = exc.reason or ""
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        reason = json.loads(exc.body).get("message") or reason
    name = manifest.get("metadata", {}).get("name")
    return KubernetesError(
        f"Kubernetes refused to {action} {manifest.get('kind')} {name}: {exc.status} {reason}"
    )


def _redacted(manifest: dict[str, Any]) -> dict[str, Any]:
    if manifest["kind"] != "Secret":
        return manifest
    shown = copy.deepcopy(manifest)
    shown["stringData"] = dict.fromkeys(shown["stringData"], REDACTED)
    return shown


def _hosts(root: Any) -> list[str]:
    suffix = ".runyard.json"
    hosts = [key.removesuffix(suffix) for key in root.data or {} if key.endswith(suffix)]
    return sorted(hosts, key=host_number)


def _scheduled(pod: Any) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "PodScheduled" and c.status == "True" for c in conditions)


def _waiting(pod: Any) -> Any:
    for container in (pod.status.container_statuses if pod.status else None) or []:
        if container.name == "runtime" and container.state and container.state.waiting:
            return container.state.waiting
    return None


def _terminated(pod: Any) -> Any:
    for container in (pod.status.container_statuses if pod.status else None) or []:
        if container.name == "runtime" and container.state and container.state.terminated:
            return container.state.terminated
    return None


def _event_time(event: Any) -> float:
    when = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
    return when.timestamp() if when is not None else 0.0
