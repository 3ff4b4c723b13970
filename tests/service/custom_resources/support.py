"""TrainingJob resources in a Kubernetes API server (kmock, with the CRD installed), and
their jobs driven by the real reconciler on real (sleeping) local instances."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client
from pydantic.alias_generators import to_camel

from provisioning.base import Backend
from service.custom_resources import crd, names
from service.custom_resources.controller import Controller
from service.settings import Settings
from tests.conftest import job_spec
from tests.instances import SleepingInstances
from tests.kube import KubeServer


class Cluster:
    """One test's namespace of the shared API server, mapped to the project ``default``."""

    def __init__(self, kube: KubeServer) -> None:
        kube.install(crd.definition())
        kube.install(crd.tuning_definition())
        self.kube = kube
        self.namespace = f"t-{uuid.uuid4().hex[:10]}"
        self.api_client = kube.client()
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)

    def settings(self, settings: Settings) -> Settings:
        controller = settings.controller.model_copy(
            update={"namespaces": {self.namespace: "default"}}
        )
        return settings.model_copy(
            update={
                "controller": controller,
                "stop_grace_seconds": 0.0,
                "teardown_grace_seconds": 0.5,
            }
        )

    def controller(self, settings: Settings, backend: Backend[Any] | None = None) -> Controller:
        """The controller, asking ``backend`` (else the server's own) what a job still holds."""
        if backend is None:
            return Controller(settings, self.api_client)
        return Controller(settings, self.api_client, lambda _name, _settings: backend)

    def apply(self, name: str, source_dir: Path, **spec: Any) -> dict[str, Any]:
        """A resource of ``spec``, given as the REST API's fields (``instance_count=2``)
        and written as its author would: those fields in camelCase, what is inside them
        as given (``apply_spec`` takes a spec as written)."""
        values = job_spec(source_dir, **spec)
        values.pop("name")
        return self.apply_spec(name, {to_camel(key): value for key, value in values.items()})

    def apply_spec(
        self, name: str, spec: dict[str, Any], kind: names.Kind = names.TRAINING_JOB
    ) -> dict[str, Any]:
        body = {
            "apiVersion": names.API_VERSION,
            "kind": kind.kind,
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        }
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, self.namespace, kind.plural, body
        )
        return created

    def get(self, name: str, kind: names.Kind = names.TRAINING_JOB) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            names.GROUP, names.VERSION, self.namespace, kind.plural, name
        )
        return found

    def exists(self, name: str, kind: names.Kind = names.TRAINING_JOB) -> bool:
        try:
            self.get(name, kind)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete(self, name: str, kind: names.Kind = names.TRAINING_JOB) -> None:
        self.custom.delete_namespaced_custom_object(
            names.GROUP, names.VERSION, self.namespace, kind.plural, name
        )

    def events(self, name: str) -> list[tuple[str, str, str]]:
        """(type, reason, message) of the resource's Events, as kubectl describe lists them."""
        listed = self.core.list_namespaced_event(self.namespace).items
        mine = [event for event in listed if event.involved_object.name == name]
        mine.sort(key=lambda event: (event.first_timestamp, event.metadata.name))
        return [(event.type, event.reason, event.message) for event in mine]


def sleepers(settings: Settings) -> Callable[[str, Settings], Backend[Any]]:
    backend = SleepingInstances(settings.jobs_dir)
    return lambda _name, _settings: backend
