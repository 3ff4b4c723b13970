"""The local backend: each instance a process group on the server's machine.

What the rest of Runyard may use of it is here: its record, its settings' model and the
store of catalog images it builds (``runyard images``); its other modules are its own.
"""

from __future__ import annotations

from typing import Any

from provisioning.base import KILL_WAIT_SECONDS, Backend, ServerSettings, own_settings
from provisioning.catalog import InstanceCatalog
from provisioning.local.images import ImageBuildError, ImageStore
from provisioning.local.settings import FORMER_FIELDS, LocalSettings
from provisioning.plugin import BackendPlugin

__all__ = ["PLUGIN", "ImageBuildError", "ImageStore", "LocalSettings", "image_store"]


def _build(settings: ServerSettings) -> Backend[Any]:
    from provisioning.local.backend import LocalBackend

    return LocalBackend.from_settings(settings)


def _teardown_budget(settings: ServerSettings) -> float:
    # SIGTERM, the grace, then SIGKILL and the wait for the processes to vanish.
    return settings.teardown_grace_seconds + KILL_WAIT_SECONDS


def image_store(settings: ServerSettings) -> ImageStore:
    """The store this server's local backend builds catalog images in."""
    own = own_settings(settings, PLUGIN.name, LocalSettings)
    return ImageStore(own.images_dir(settings.home))


PLUGIN = BackendPlugin(
    name="local",
    instance_types=InstanceCatalog.local_types,
    build=_build,
    teardown_budget=_teardown_budget,
    settings_model=LocalSettings,
    former_fields=FORMER_FIELDS,
)
