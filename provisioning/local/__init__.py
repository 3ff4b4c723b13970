"""The local backend: each instance a process group on the server's machine."""

from __future__ import annotations

from typing import Any

from provisioning.base import KILL_WAIT_SECONDS, Backend, ServerSettings
from provisioning.catalog import InstanceCatalog
from provisioning.plugin import BackendPlugin


def _build(settings: ServerSettings) -> Backend[Any]:
    from provisioning.local.backend import LocalBackend

    return LocalBackend.from_settings(settings)


def _teardown_budget(settings: ServerSettings) -> float:
    # SIGTERM, the grace, then SIGKILL and the wait for the processes to vanish.
    return settings.teardown_grace_seconds + KILL_WAIT_SECONDS


PLUGIN = BackendPlugin(
    name="local",
    instance_types=InstanceCatalog.local_types,
    build=_build,
    teardown_budget=_teardown_budget,
)
