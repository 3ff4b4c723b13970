"""Jobs driven through the service directly, as the API and the runtime would, for the
tests of the reconciler: submit, report for an instance, read back what the job says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service.jobs import service
from service.jobs.schemas import InstanceReport, JobCreate
from service.kit.db import session_scope, utcnow
from service.settings import Settings
from tests.conftest import job_spec


def submit(settings: Settings, source_dir: Path, **spec: Any) -> str:
    with session_scope(settings.database_url) as session:
        job = JobCreate.model_validate(job_spec(source_dir, **spec))
        return service.submit(session, settings, job, "admin").name


def report(settings: Settings, name: str, host: str, phase: str, **fields: Any) -> None:
    """What the runtime on ``host`` would report."""
    sent = InstanceReport(phase=phase, time=utcnow(), **fields)  # type: ignore[arg-type]
    with session_scope(settings.database_url) as session:
        service.record_report(session, settings, service.get(session, name), host, sent)


def job_state(settings: Settings, name: str) -> dict[str, Any]:
    with session_scope(settings.database_url) as session:
        job = service.get(session, name)
        return {
            "status": job.status,
            "secondary": job.secondary_status,
            "reason": job.failure_reason,
            "attempt": job.attempt,
            "restarts": job.restarts,
            "infrastructure_restarts": job.infrastructure_restarts,
            "interruptions": job.interruptions,
            "billable_seconds": job.billable_seconds,
            "pending_reason": job.pending_reason,
            "instances": {row.host: row.phase for row in job.instances},
            "transitions": [(t.secondary_status, t.message) for t in job.transitions],
            "secondaries": [t.secondary_status for t in job.transitions],
        }
