"""A backend that the tests add, as a new backend's package would be: its settings' model,
its backend, and its record; registering the record is the one line left."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from provisioning.base import Backend, ServerSettings, own_settings
from provisioning.catalog import InstanceCatalog
from provisioning.plugin import BackendPlugin
from tests.inert_backend import InertBackend


class BatchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    partition: str = Field(
        default="default", description="The batch system's partition jobs are queued in."
    )


class BatchBackend(InertBackend):
    name = "batch"

    def __init__(self, partition: str) -> None:
        self.partition = partition


def _build(settings: ServerSettings) -> Backend[Any]:
    return BatchBackend(own_settings(settings, PLUGIN.name, BatchSettings).partition)


PLUGIN = BackendPlugin(
    name="batch",
    title="Batch",
    instance_types=InstanceCatalog.cluster_types,
    build=_build,
    teardown_budget=lambda settings: 1.0,
    settings_model=BatchSettings,
)
