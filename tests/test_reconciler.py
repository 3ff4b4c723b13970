"""The reconciler on its own: real database, real local backend, no broker in the way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.jobs import service
from service.jobs.schemas import JobCreate
from service.kit.db import session_scope
from service.settings import Settings
from tests.conftest import job_spec
from worker.backends.base import Backend, LaunchRequest, Materialized
from worker.backends.local import LocalBackend, LocalPlan
from worker.reconciler import Reconciler


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # No grace after a stop: these tests look at the decisions, not at scripts saving.
    return settings.model_copy(update={"stop_grace_seconds": 0.0, "teardown_grace_seconds": 0.5})


def _submit(settings: Settings, source_dir: Path, **spec: Any) -> str:
    with session_scope(settings.database_url) as session:
        return service.submit(
            session, settings, JobCreate.model_validate(job_spec(source_dir, **spec))
        ).name


def _job(settings: Settings, name: str) -> dict[str, Any]:
    with session_scope(settings.database_url) as session:
        job = service.get(session, name)
        return {
            "status": job.status,
            "secondary": job.secondary_status,
            "reason": job.failure_reason,
            "transitions": [t.secondary_status for t in job.transitions],
        }


def test_a_launch_that_cannot_start_fails_the_job_with_the_reason(
    settings: Settings, source_dir: Path
) -> None:
    name = _submit(settings, source_dir)

    def broken(_name: str, _settings: Settings) -> LocalBackend:
        return LocalBackend(settings.jobs_dir, python="/nonexistent/python3", teardown_grace=1)

    Reconciler(settings, broken).reconcile(name)
    job = _job(settings, name)
    assert (job["status"], job["secondary"]) == ("Failed", "Failed")
    assert job["reason"].startswith("InternalServerError: FileNotFoundError:")
    assert "/nonexistent/python3" in job["reason"]
    assert not (settings.jobs_dir / name).exists()


def test_stop_before_launch_launches_nothing(settings: Settings, source_dir: Path) -> None:
    name = _submit(settings, source_dir)
    with session_scope(settings.database_url) as session:
        service.stop(session, settings, name)
    Reconciler(settings).reconcile(name)
    job = _job(settings, name)
    assert (job["status"], job["secondary"]) == ("Stopped", "Stopped")
    assert job["transitions"] == ["Starting", "Stopping", "Stopped"]
    assert not (settings.jobs_dir / name).exists()


class _StopDuringLaunch(LocalBackend):
    """A user's stop arrives while the instances are being launched."""

    def __init__(self, settings: Settings, name: str) -> None:
        super().__init__(settings.jobs_dir, teardown_grace=1)
        self.settings = settings
        self.job_name = name

    def apply(self, materialized: Materialized[LocalPlan]) -> None:
        with session_scope(self.settings.database_url) as session:
            service.stop(session, self.settings, self.job_name)
        super().apply(materialized)


def test_a_stop_during_launch_is_not_overwritten(settings: Settings, source_dir: Path) -> None:
    name = _submit(settings, source_dir, entry_point="train.py")
    backend = _StopDuringLaunch(settings, name)

    def build(_name: str, _settings: Settings) -> Backend[Any]:
        return backend

    Reconciler(settings, build).reconcile(name)
    job = _job(settings, name)
    assert (job["status"], job["secondary"]) == ("Stopped", "Stopped")
    assert job["transitions"][-2:] == ["Stopping", "Stopped"]
    assert not (settings.jobs_dir / name).exists()


def test_launch_request_carries_a_job_scoped_token(settings: Settings, source_dir: Path) -> None:
    name = _submit(settings, source_dir)
    seen: list[LaunchRequest] = []

    class Recording(LocalBackend):
        def materialize(self, request: LaunchRequest) -> Materialized[LocalPlan]:
            seen.append(request)
            return super().materialize(request)

    Reconciler(settings, lambda _n, _s: Recording(settings.jobs_dir, teardown_grace=1)).reconcile(
        name
    )
    from service.auth.tokens import job_id_from_token

    assert job_id_from_token(settings.signing_key(), seen[0].token) == seen[0].job.id
    with session_scope(settings.database_url) as session:
        service.stop(session, settings, name)
    Reconciler(settings).reconcile(name)
    assert _job(settings, name)["status"] == "Stopped"
    assert not (settings.jobs_dir / name).exists()
