"""A Kubernetes API server for tests: kmock's emulator on a real port, in its own thread.

The backend under test talks to it with the official client over HTTP, as it would to a
cluster. Nothing runs pods here, so the tests play the kubelet and the scheduler: they
write pod status (phase, conditions, exit codes) through the same API.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kubernetes import client

NAMESPACE = "runyard-jobs"
EVENTS = "v1/events"
LEASES = "coordination.k8s.io/v1/leases"


def _text() -> Any:
    import kmock

    return kmock.headers({"Content-Type": "text/plain"})


@functools.cache
def _cluster() -> type[Any]:
    """The emulator, plus what a real API server sets on every object it creates. Made
    at first use: a run without Kubernetes tests does not load kmock."""
    import kmock

    class Cluster(kmock.KubernetesEmulator):  # type: ignore[misc]
        # Per resource ("group/version/plural"): what its CRD's schema finds wrong with an
        # object (given the object it replaces, on an update), as the API server's
        # admission would (``KubeServer.install``).
        admission: dict[str, Callable[[dict[str, Any], dict[str, Any] | None], list[str]]]
        _versions = itertools.count(1)

        async def _handle(self, request: Any) -> Any:
            if request.resource is not None and request.method == "PUT" and request.name:
                return await self._replace(request)
            if request.resource is not None and request.action == kmock.action.CREATE:
                metadata = request.data.setdefault("metadata", {})
                metadata.setdefault("uid", str(uuid.uuid4()))
                metadata.setdefault("creationTimestamp", datetime.now(UTC).isoformat())
                metadata["resourceVersion"] = str(next(self._versions))
                self._admit(request, request.data)
            elif (
                request.resource is not None
                and request.action == kmock.action.UPDATE
                and isinstance(request.data, dict)
            ):
                self._check_version(request, request.data)
                if request.subresource == "status":
                    # The status subresource changes the status only.
                    for key in [key for key in request.data if key != "status"]:
                        del request.data[key]
                elif self._plural(request) in self.admission:
                    request.data.pop("status", None)  # and the main resource never does
                    self._admit(request, self._patched(request))
                request.data.setdefault("metadata", {})["resourceVersion"] = str(
                    next(self._versions)
                )
            return await super()._handle(request)

        async def _replace(self, request: Any) -> Any:
            """PUT: the whole object replaced, refused (409) when the resourceVersion it
            was read at is no longer the object's (optimistic concurrency)."""
            from aiohttp import web

            key = (request.resource, request.namespace, request.name)
            async with self._lock:
                if key not in self.objects or self.objects[key].deleted:
                    raise kmock.KubernetesObjectNotFoundError()
                self._check_version(request, request.data)
                self._admit(request, request.data)
                request.data["metadata"]["resourceVersion"] = str(next(self._versions))
                self.objects[key].create(request.data)
                raw = self.objects[key].raw
                await self._buses[request.resource].put({"type": "MODIFIED", "object": raw})
            return web.json_response(raw)

        def _check_version(self, request: Any, data: dict[str, Any]) -> None:
            given = (data.get("metadata") or {}).get("resourceVersion")
            key = (request.resource, request.namespace, request.name)
            if given is None or key not in self.objects or self.objects[key].deleted:
                return
            held = self.objects[key].get("metadata", {}).get("resourceVersion")
            if given != held:
                raise kmock.KubernetesError(
                    status=409,
                    reason="Conflict",
                    message=f"Operation cannot be fulfilled on {request.resource.plural} "
                    f'"{request.name}": the object has been modified; please apply your '
                    "changes to the latest version and try again",
                )

        def _patched(self, request: Any) -> dict[str, Any]:
            from kmock._internal import dicts

            key = (request.resource, request.namespace, request.name)
            if key not in self.objects or self.objects[key].deleted:
                return dict(request.data)
            current = copy.deepcopy(self.objects[key].raw)
            return dict(dicts.patch_dict(current, request.data))

        def _plural(self, request: Any) -> str:
            resource = request.resource
            return f"{resource.group}/{resource.version}/{resource.plural}"

        def _admit(self, request: Any, obj: dict[str, Any]) -> None:
            check = self.admission.get(self._plural(request))
            key = (request.resource, request.namespace, request.name)
            live = request.name and key in self.objects and not self.objects[key].deleted
            old = copy.deepcopy(self.objects[key].raw) if live else None
            problems = check(obj, old) if check is not None else []
            if problems:
                kind = obj.get("kind", request.resource.plural)
                name = (obj.get("metadata") or {}).get("name", "")
                raise kmock.KubernetesError(
                    status=422,
                    reason="Invalid",
                    message=f'{kind} "{name}" is invalid: {"; ".join(problems)}',
                )

        async def _serve_version(self, request: Any) -> Any:
            # A real API server names the core group's version "v1", not "/v1"; clients
            # that map kinds to resources through discovery (Helm's) find none otherwise.
            listing = await super()._serve_version(request)
            listing["groupVersion"] = listing["groupVersion"].removeprefix("/")
            return listing

    return Cluster


class KubeServer:
    def __init__(self) -> None:
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="kmock", daemon=True)
        self.url = ""
        self.emulator: Any = None
        self._stop: asyncio.Event | None = None

    def start(self) -> KubeServer:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the Kubernetes mock server did not start")
        return self

    def _serve(self) -> None:
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        import kmock

        async with _cluster()() as emulator, kmock.Server(emulator) as server:
            emulator.admission = {}
            # Resources the emulator knows only once declared (it learns the others from
            # the objects created).
            emulator.resources[EVENTS] = {}
            emulator.resources[LEASES] = {}
            # A container that printed nothing, unless a test says what it printed.
            (emulator**-1)["get"][kmock.subresource("log")] << _text() << b""
            self.emulator = emulator
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self._loop.close()

    def answer_helm(self, kubernetes_version: str) -> None:
        """Answer what Helm asks a cluster before it renders a chart there: every built-in
        kind (discovery), the server's version (a chart's kubeVersion is held to it), and
        the OpenAPI document it validates objects with, empty: tests validate them against
        kubernetes-validate's schemas instead."""
        import kmock

        major, minor, _patch = kubernetes_version.split(".")
        with warnings.catch_warnings():
            # kmock reads its bundled list with an importlib call Python deprecates.
            warnings.simplefilter("ignore", DeprecationWarning)
            self.emulator.resources.load_bundled()
        version = {"major": major, "minor": minor, "gitVersion": f"v{kubernetes_version}"}
        self.emulator["get"]["/version"] << version
        protobuf = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        self.emulator["get"]["/openapi/v2"] << kmock.headers({"Content-Type": protobuf}) << b""

    def api(self) -> client.CoreV1Api:
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return client.CoreV1Api(client.ApiClient(configuration))

    def client(self) -> client.ApiClient:
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    def install(self, crd: dict[str, Any]) -> None:
        """A CustomResourceDefinition, as the API server takes one: its resource is served
        from now on, and every object of it is admitted through its schema."""
        spec = crd["spec"]
        for version in spec["versions"]:
            plural = f"{spec['group']}/{version['name']}/{spec['names']['plural']}"
            schema = version["schema"]["openAPIV3Schema"]
            self.emulator.resources[plural] = {}
            self.emulator.admission[plural] = functools.partial(admission_problems, schema)

    def set_log(self, pod: str, text: str) -> None:
        """What the pod's container printed, served as the kubelet would: the last
        ``tailLines`` lines, then at most the first ``limitBytes`` of those."""
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/log"
        self.emulator["get"][path] << _text() << functools.partial(_log, text.encode())

    def objects_of(self, job_id: str) -> list[tuple[str, str]]:
        """(kind, name) of every live object labelled with the job, of any kind."""
        found = []
        for (resource, _namespace, name), obj in list(self.emulator.objects.items()):
            if obj.deleted:
                continue
            labels = obj.get("metadata", {}).get("labels", {}) or {}
            if labels.get("runyard.io/job-id") == job_id:
                found.append((resource.plural, name))
        return sorted(found)

    def describe_job(self, job_id: str) -> str:
        """The job's pods as ``kubectl get pods`` and its events would show them, for a
        failing test's message."""
        lines = []
        for (resource, _namespace, name), obj in sorted(
            self.emulator.objects.items(), key=lambda item: (item[0][0].plural, *item[0][1:])
        ):
            labels = obj.get("metadata", {}).get("labels", {}) or {}
            if resource.plural != "pods" or labels.get("runyard.io/job-id") != job_id:
                continue
            status = obj.get("status", {}) or {}
            states = [
                f"{kind}: {state.get('reason', '')}".rstrip(": ")
                for container in status.get("containerStatuses", []) or []
                for kind, state in (container.get("state") or {}).items()
            ]
            gone = " (deleted)" if obj.deleted else ""
            lines.append(f"pod {name}{gone}: {status.get('phase', 'no status')} {states}")
        events = [
            obj
            for (resource, _namespace, _name), obj in self.emulator.objects.items()
            if resource.plural == "events"
        ]
        for event in events[-10:]:
            lines.append(f"event: {event.get('reason', '')}: {event.get('message', '')}")
        return "\n".join(lines) or "no pods"

    def all_objects(self) -> list[tuple[str, str]]:
        return sorted(
            (resource.plural, name)
            for (resource, _namespace, name), obj in list(self.emulator.objects.items())
            if not obj.deleted
        )


@pytest.fixture(scope="session")
def kube_server() -> Iterator[KubeServer]:
    server = KubeServer().start()
    yield server
    server.stop()


# -- playing the kubelet and the scheduler ----------------------------------------------


def set_pod_status(api: client.CoreV1Api, name: str, status: dict[str, Any]) -> None:
    api.patch_namespaced_pod_status(name, NAMESPACE, {"status": status})


def running(ip: str = "10.0.0.1") -> dict[str, Any]:
    return {
        "phase": "Running",
        "podIP": ip,
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [_container({"running": {"startedAt": "2026-01-01T00:00:00Z"}})],
    }


def exited(code: int, reason: str = "Error") -> dict[str, Any]:
    terminated = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else reason,
        "startedAt": "2026-01-01T00:00:00Z",
        "finishedAt": "2026-01-01T00:01:00Z",
    }
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "containerStatuses": [_container({"terminated": terminated})],
    }


def unschedulable(message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ],
    }


def starting(reason: str = "ContainerCreating", message: str = "") -> dict[str, Any]:
    """Scheduled on a node, its container not started yet: pulling its image, or failing
    to start (``reason`` as the kubelet says it)."""
    waiting = {"reason": reason, **({"message": message} if message else {})}
    return {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [_container({"waiting": waiting})],
    }


def _log(printed: bytes, request: Any) -> bytes:
    lines = request.params.get("tailLines")
    if lines is not None:
        printed = b"".join(printed.splitlines(keepends=True)[-int(lines) :]) if int(lines) else b""
    limit = request.params.get("limitBytes")
    return printed if limit is None else printed[: int(limit)]


def _container(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "runtime",
        "image": "runyard/runtime:0.1.0",
        "imageID": "",
        "ready": "running" in state,
        "restartCount": 0,
        "state": state,
    }


# -- the API server's admission of custom resources ----------------------------------


def admission_problems(
    schema: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None = None
) -> list[str]:
    """What the API server would refuse in ``obj`` (replacing ``old``, on an update) by its
    CRD's structural schema, each as it names one (``spec.instance_count: Invalid value:
    ...``), unknown fields included (kubectl's strict field validation), then by the
    schema's CEL rules (``x-kubernetes-validations``), which the API server evaluates only
    on an object the schema admits."""
    from openapi_schema_validator import OAS30Validator

    validator = OAS30Validator(_strict(schema))
    problems = []
    for error in sorted(validator.iter_errors(obj), key=lambda error: list(error.absolute_path)):
        path = ".".join(str(part) for part in error.absolute_path) or "<root>"
        problems.append(f"{path}: Invalid value: {error.message}")
    return problems or list(_rule_problems(schema, obj, old, ()))


# How the API server words a rule's ``reason`` (Invalid value when it gives none).
_RULE_REASONS = {
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
}


def _rule_problems(
    schema: dict[str, Any], value: Any, old: Any, path: tuple[str, ...]
) -> Iterator[str]:
    """The CEL rules of ``schema`` and of the schemas below it that ``value`` breaks, with
    ``self`` the value at the rule's place and ``oldSelf`` the value it replaces. As the
    API server does: a rule that reads ``oldSelf`` (a transition rule) is evaluated only
    on an update that has an old value there; no rule is evaluated on a null value; a
    rule's ``fieldPath`` (a field below its place) and ``reason`` say where and how the
    problem is named."""
    import celpy

    if value is None:
        return
    for rule in schema.get("x-kubernetes-validations", []):
        transition = "oldSelf" in rule["rule"]
        if transition and old is None:
            continue
        environment = celpy.Environment()
        program = environment.program(environment.compile(rule["rule"]))
        activation = {"self": celpy.json_to_cel(value)}
        if transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = program.evaluate(activation)
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            below = rule.get("fieldPath", "").lstrip(".")
            where = ".".join(part for part in (*path, *below.split(".")) if part) or "<root>"
            reason = _RULE_REASONS.get(rule.get("reason", ""), "Invalid value")
            yield f"{where}: {reason}: {rule.get('message', rule['rule'])}"
    if isinstance(value, dict):
        for name, child in (schema.get("properties") or {}).items():
            if name in value:
                before = old.get(name) if isinstance(old, dict) else None
                yield from _rule_problems(child, value[name], before, (*path, name))
        entry = schema.get("additionalProperties")
        if isinstance(entry, dict):
            for key, child_value in value.items():
                before = old.get(key) if isinstance(old, dict) else None
                yield from _rule_problems(entry, child_value, before, (*path, str(key)))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        # Items are new on every change as far as transition rules go (no list-type keys).
        for index, item in enumerate(value):
            yield from _rule_problems(schema["items"], item, None, (*path, str(index)))


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with unknown fields refused where it lists its fields."""
    out = {key: value for key, value in schema.items() if not key.startswith("x-kubernetes")}
    if schema.get("properties"):
        out["properties"] = {name: _strict(child) for name, child in schema["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(schema["additionalProperties"])
    if isinstance(schema.get("items"), dict):
        out["items"] = _strict(schema["items"])
    return out
