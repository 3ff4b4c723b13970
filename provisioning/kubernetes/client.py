"""Clients of the cluster the Kubernetes backend's settings reach, one per configuration
and process: the reconciler builds a backend on every pass, the TrainingJob controller
runs beside it, and each client holds a connection pool. The rest of Runyard asks for one
through ``provisioning.kubernetes.api_client``."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from provisioning.kubernetes.settings import KubernetesSettings

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


@functools.cache
def shared_client(settings_json: str) -> ApiClient:
    """The client of the cluster ``KubernetesSettings`` (as JSON, a cache key) reach."""
    from kubernetes import client, config

    settings = KubernetesSettings.model_validate_json(settings_json)
    if settings.api_url:
        configuration = client.Configuration()
        configuration.host = settings.api_url.rstrip("/")
        return client.ApiClient(configuration)
    if settings.kubeconfig or settings.context:
        api: ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=settings.kubeconfig, context=settings.context
        )
        return api
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)
