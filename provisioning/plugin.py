"""What a backend package exports: one record that the registry lists.

The record is all the server knows of a backend until it uses one: the name jobs and
``RUNYARD_BACKENDS`` give it, which of a server's instance types it runs (checked at
submission), the model of its own settings (``RUNYARD_<NAME>__<FIELD>``: the server's
settings are composed of the records' models, ``service.settings``), how long its teardown
may wait (what the reconciler's lease must outlast) and a factory that builds it.
The factory imports the backend's module only when called, so the module that defines a
record never loads a cloud SDK: a server that runs only local jobs never imports
``kubernetes`` or ``boto3``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from provisioning.base import Backend, ServerSettings
from provisioning.catalog import InstanceCatalog


@dataclass(frozen=True)
class BackendPlugin:
    name: str
    # The types it runs, of a server's catalog.
    instance_types: Callable[[InstanceCatalog], frozenset[str]]
    # Builds the backend from the server's settings, importing its module only then.
    build: Callable[[ServerSettings], Backend[Any]]
    # The longest one teardown of a job may take, in seconds, under the server's settings.
    teardown_budget: Callable[[ServerSettings], float]
    # The backend's own settings, nested in the server's under its name; None: it has none.
    settings_model: type[BaseModel] | None = None
    # Fields of the server's settings that were the backend's before it had a model of its
    # own -> the field of the model each now is: the server still reads those variables
    # (RUNYARD_<FORMER>) into the backend's settings, where its new name is not set.
    former_fields: Mapping[str, str] = field(default_factory=dict)
    # What people call it ("Kubernetes" in "the Kubernetes backend's settings"); "": its name.
    title: str = ""

    @property
    def shown_as(self) -> str:
        return self.title or self.name
