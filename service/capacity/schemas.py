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
    # The front of the line, in the order the jobs would start (``waiting_limit`` of them).
    waiting: list[HoldingPublic]
    # Every job waiting in the type's line.
    waiting_count: int


class CapacityPublic(BaseModel):
    types: list[TypeLinePublic]


class PlacePublic(BaseModel):
    instance_type: str
    # 1 for the next job of the type to start; None for a job not waiting in line.
    place: int | None
    waiting_count: int
