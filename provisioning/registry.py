"""Backends by name, built from the server's settings: the one way in to provisioning.

Each backend package exports one record (``provisioning.plugin``); this dict of them is
everything the server knows of its backends, its settings included (``service.settings``
composes the server's settings of the records' models). Adding a backend is its package
and one line below. A record builds its backend only when asked, so a server that runs
everything locally never loads the cluster backends or their SDKs (``kubernetes``,
``boto3``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from provisioning import ec2, kubernetes, local
from provisioning.base import Backend, ServerSettings
from provisioning.plugin import BackendPlugin

PLUGINS: dict[str, BackendPlugin] = {}


def register(plugin: BackendPlugin) -> BackendPlugin:
    """Offer ``plugin``'s backend under its name. The server's settings take its settings'
    model when they are composed (``service.settings.settings_class``), which the module
    ``service.settings`` does once, as it is imported."""
    if plugin.name in PLUGINS:
        raise ValueError(f"a backend named {plugin.name!r} is registered already")
    PLUGINS[plugin.name] = plugin
    return plugin


for _plugin in (local.PLUGIN, kubernetes.PLUGIN, ec2.PLUGIN):
    register(_plugin)


def build(name: str, settings: ServerSettings) -> Backend[Any]:
    plugin = PLUGINS.get(name)
    if plugin is None:
        raise KeyError(f"unknown backend {name!r}")
    return plugin.build(settings)


def teardown_budget(names: Iterable[str], settings: ServerSettings) -> float:
    """The longest one teardown of these backends may take, in seconds (names no record
    has, from a misspelt RUNYARD_BACKENDS, take none: no job can run on them)."""
    return max(
        (PLUGINS[name].teardown_budget(settings) for name in names if name in PLUGINS),
        default=0.0,
    )
