"""The Kubernetes backend: one pod per instance, through the official client.

What the rest of Runyard may use of it is here: its record, its settings' model, the
syntax of the names Kubernetes gives objects, and ``api_client``, the shared factory of
clients of the cluster its settings reach (the TrainingJob controller's too); its other
modules are its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provisioning.base import KILL_WAIT_SECONDS, Backend, ServerSettings, own_settings
from provisioning.catalog import InstanceCatalog
from provisioning.kubernetes.settings import DNS_LABEL, DNS_SUBDOMAIN, KubernetesSettings
from provisioning.plugin import BackendPlugin

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["DNS_LABEL", "DNS_SUBDOMAIN", "PLUGIN", "KubernetesSettings", "api_client"]


def _build(settings: ServerSettings) -> Backend[Any]:
    from provisioning.kubernetes.backend import KubernetesBackend

    return KubernetesBackend.from_settings(settings)


def _teardown_budget(settings: ServerSettings) -> float:
    # Pods get the stop grace, then teardown's own, then a kill and its wait.
    return settings.stop_grace_seconds + settings.teardown_grace_seconds + KILL_WAIT_SECONDS


def api_client(settings: ServerSettings) -> ApiClient:
    """A client of the cluster the Kubernetes backend's settings reach (``kubeconfig``,
    ``context`` or ``api_url``), shared within the process with the backend's own."""
    from provisioning.kubernetes.client import shared_client

    own = own_settings(settings, PLUGIN.name, KubernetesSettings)
    return shared_client(own.model_dump_json())


PLUGIN = BackendPlugin(
    name="kubernetes",
    title="Kubernetes",
    instance_types=InstanceCatalog.cluster_types,
    build=_build,
    teardown_budget=_teardown_budget,
    settings_model=KubernetesSettings,
)
