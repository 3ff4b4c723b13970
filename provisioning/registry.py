"""Backends by name, built from the server's settings: the one way in to provisioning.

Every backend is imported only when built, so a server that runs everything locally never
loads the cluster backends or their SDKs (``kubernetes``, ``boto3``).
"""

from __future__ import annotations

from typing import Any

from provisioning.base import Backend, ServerSettings
from provisioning.catalog import CLUSTER_TYPES, LOCAL_TYPES

# What each backend can run: validated at submission, before any backend is built.
BACKENDS: dict[str, frozenset[str]] = {
    "local": LOCAL_TYPES,
    "kubernetes": CLUSTER_TYPES,
    "ec2": CLUSTER_TYPES,
}


def build(name: str, settings: ServerSettings) -> Backend[Any]:
    if name == "local":
        from provisioning.local.backend import LocalBackend
        from provisioning.local.images import ImageStore

        return LocalBackend(
            settings.jobs_dir,
            teardown_grace=settings.teardown_grace_seconds,
            isolation=settings.local_isolation,
            peer_timeout=settings.peer_timeout_seconds or None,
            catalog=settings.catalog,
            images=ImageStore(settings.images_dir),
            download_cache=settings.cache_dir / "pip",
            container_engine=settings.container_engine,
        )
    if name == "kubernetes":
        from provisioning.kubernetes.backend import KubernetesBackend

        return KubernetesBackend.from_settings(settings)
    if name == "ec2":
        from provisioning.ec2.backend import Ec2Backend

        return Ec2Backend.from_settings(settings)
    raise KeyError(f"unknown backend {name!r}")
