"""Capacity: what runs and what waits, per instance type."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.auth.access import Principal
from service.auth.deps import CurrentUser
from service.capacity import service
from service.capacity.schemas import CapacityPublic, HoldingPublic, TypeLinePublic
from service.kit.deps import ReadSessionDep, SettingsDep
from service.kit.errors import replies

router = APIRouter(prefix="/v1/capacity", tags=["capacity"])


@router.get("", response_model=CapacityPublic, responses=replies(401, 403, 422))
def capacity(
    session: ReadSessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    waiting_limit: Annotated[
        int, Query(ge=0, le=1000, description="Waiting jobs shown per type, from the front")
    ] = 100,
) -> CapacityPublic:
    """Per instance type with live jobs: how many instances are in use of how many, the
    jobs holding them, and the jobs waiting in the order they would start, with why (the
    first ``waiting_limit``, and how many wait in all). Jobs of projects the caller cannot
    see keep their place in line but not their names."""
    return CapacityPublic(
        types=[
            TypeLinePublic(
                instance_type=line.instance_type,
                capacity=line.capacity,
                in_use=line.in_use,
                running=[_public(held, user) for held in line.running],
                waiting=[_public(held, user) for held in line.waiting],
                waiting_count=line.waiting_count,
            )
            for line in service.overview(session, settings, waiting_limit)
        ]
    )


def _public(held: service.Holding, user: Principal) -> HoldingPublic:
    seen = user.sees(held.project)
    return HoldingPublic(
        name=held.name if seen else None,
        project=held.project if seen else None,
        instance_count=held.count,
        priority=held.priority,
        # A reason may name the jobs and project it waits behind.
        reason=held.reason if seen or held.reason is None else "Waiting",
    )
