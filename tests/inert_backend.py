"""A backend that holds nothing: what tests of the registry and of planning build on."""

from __future__ import annotations

from typing import Any

from provisioning.base import Backend, InstanceStatus, JobRef, LaunchRequest, Materialized


class InertBackend(Backend[dict[str, Any]]):
    """A backend that holds nothing: what a new backend's record needs to be offered."""

    name = "inert"

    def materialize(self, request: LaunchRequest) -> Materialized[dict[str, Any]]:
        return Materialized(self.name, {})

    def apply(self, materialized: Materialized[dict[str, Any]]) -> None:
        pass

    def exists(self, job: JobRef) -> bool:
        return False

    def describe(self, job: JobRef) -> dict[str, InstanceStatus] | None:
        return None

    def _cancel_existing(
        self, job: JobRef, *, force: bool, grace_seconds: float | None = None
    ) -> None:
        pass

    def teardown(self, job: JobRef) -> None:
        pass
