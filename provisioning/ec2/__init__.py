"""The EC2 backend: one instance per host, through boto3.

What the rest of Runyard may use of it is here: its record and its settings' model; its
other modules are its own.
"""

from __future__ import annotations

from typing import Any

from provisioning.base import Backend, ServerSettings, own_settings
from provisioning.catalog import InstanceCatalog
from provisioning.ec2.settings import Ec2Settings
from provisioning.plugin import BackendPlugin

__all__ = ["PLUGIN", "Ec2Settings"]


def _build(settings: ServerSettings) -> Backend[Any]:
    from provisioning.ec2.backend import Ec2Backend

    return Ec2Backend.from_settings(settings)


def _teardown_budget(settings: ServerSettings) -> float:
    # Teardown polls until every instance is terminated, for at most this long.
    return own_settings(settings, PLUGIN.name, Ec2Settings).teardown_timeout_seconds


PLUGIN = BackendPlugin(
    name="ec2",
    title="EC2",
    instance_types=InstanceCatalog.cluster_types,
    build=_build,
    teardown_budget=_teardown_budget,
    settings_model=Ec2Settings,
)
