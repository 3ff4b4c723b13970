"""Backends by name, built from the server's settings: the one way in to provisioning.

Each backend package exports one record (``provisioning.plugin``); this dict of them is
everything the server knows of its backends. A record builds its backend only when asked,
so a server that runs everything locally never loads the cluster backends or their SDKs
(``kubernetes``, ``boto3``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from provisioning import ec2, kubernetes, local
from provisioning.base import Backend, ServerSettings
from provisioning.plugin import BackendPlugin

PLUGINS: dict[str, BackendPlugin] = {
    plugin.name: plugin for plugin in (local.PLUGIN, kubernetes.PLUGIN, ec2.PLUGIN)
}


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
