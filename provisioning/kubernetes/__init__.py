"""The Kubernetes backend: one pod per instance, through the official client."""

from __future__ import annotations

from typing import Any

from provisioning.base import KILL_WAIT_SECONDS, Backend, ServerSettings
from provisioning.catalog import InstanceCatalog
from provisioning.kubernetes.settings import KubernetesSettings
from provisioning.plugin import BackendPlugin


def _build(settings: ServerSettings) -> Backend[Any]:
    from provisioning.kubernetes.backend import KubernetesBackend

    return KubernetesBackend.from_settings(settings)


def _teardown_budget(settings: ServerSettings) -> float:
    # Pods get the stop grace, then teardown's own, then a kill and its wait.
    return settings.stop_grace_seconds + settings.teardown_grace_seconds + KILL_WAIT_SECONDS


PLUGIN = BackendPlugin(
    name="kubernetes",
    instance_types=InstanceCatalog.cluster_types,
    build=_build,
    teardown_budget=_teardown_budget,
    settings_model=KubernetesSettings,
)
