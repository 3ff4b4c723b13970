"""Backends by name, built from the server's settings.

The cluster backends import their SDK (``kubernetes``, ``boto3``) only when built, so a
server that runs everything locally never loads them.
"""

from __future__ import annotations

from typing import Any

from service.instance_types import CATALOG
from service.settings import Settings
from worker.backends.base import Backend
from worker.backends.local import LocalBackend

# What each backend can run: validated at submission, before any backend is built.
CLUSTER_TYPES = frozenset(name for name in CATALOG if name.startswith("ml."))
BACKENDS: dict[str, frozenset[str]] = {
    LocalBackend.name: LocalBackend.instance_types,
    "kubernetes": CLUSTER_TYPES,
    "ec2": CLUSTER_TYPES,
}


def build(name: str, settings: Settings) -> Backend[Any]:
    if name == LocalBackend.name:
        return LocalBackend(settings.jobs_dir, teardown_grace=settings.teardown_grace_seconds)
    if name == "kubernetes":
        from worker.backends.kubernetes import KubernetesBackend

        return KubernetesBackend.from_settings(settings)
    if name == "ec2":
        from worker.backends.ec2 import Ec2Backend

        return Ec2Backend.from_settings(settings)
    raise KeyError(f"unknown backend {name!r}")
