"""What the capacity route gives."""

from __future__ import annotations

from pydantic import BaseModel


class HoldingPublic(BaseModel):
    # None for another project's job: its place in line shows, not what it is.
    name: str | None
    project: str | None
    instance_count: int
    priority: int
    # Why it waits; None for a job that holds its instances.
    reason: str | None


class TypeLinePublic(BaseModel):
    instance_type: str
    # None: this server sets no limit for the type.
    capacity: int | None
    in_use: int
    running: list[HoldingPublic]
    waiting: list[HoldingPublic]


class CapacityPublic(BaseModel):
    types: list[TypeLinePublic]
