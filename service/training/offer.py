"""The instance types this server offers: those a backend it runs (RUNYARD_BACKENDS) can
start, with their size and how many may run at once, for a client to choose among."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from provisioning import registry
from service.auth.deps import CurrentUser
from service.kit.deps import SettingsDep
from service.kit.errors import replies
from service.settings import Settings

router = APIRouter(prefix="/v1/instance-types", tags=["instance types"])


class InstanceTypePublic(BaseModel):
    name: str
    backend: str
    vcpus: int | None
    memory_gib: float | None
    gpus: int
    gpu_model: str | None
    # How many instances of it may run at once on this server; None: no limit.
    capacity: int | None


class InstanceTypesPublic(BaseModel):
    types: list[InstanceTypePublic]
    # The most instances one job may ask for.
    max_instance_count: int


def offered(settings: Settings) -> list[InstanceTypePublic]:
    catalog = settings.instance_catalog
    types = []
    for name, backend in sorted(settings.backends.items()):
        plugin = registry.PLUGINS.get(backend)
        kind = catalog.get(name)
        # A mapping the backend cannot act on is refused at submission: not offered.
        if plugin is None or kind is None or name not in plugin.instance_types(catalog):
            continue
        types.append(
            InstanceTypePublic(
                name=name,
                backend=backend,
                vcpus=kind.vcpus,
                memory_gib=kind.memory_gib,
                gpus=kind.gpus,
                gpu_model=kind.gpu_model,
                capacity=settings.capacity.get(name),
            )
        )
    return types


@router.get("", response_model=InstanceTypesPublic, responses=replies(401))
def instance_types(settings: SettingsDep, user: CurrentUser) -> InstanceTypesPublic:
    """The instance types a job may name on this server, by name."""
    return InstanceTypesPublic(
        types=offered(settings), max_instance_count=settings.max_instance_count
    )
