"""Jobs driven through the service directly, as the API and the runtime would, for the
tests of the reconciler: submit, report for an instance, read back what the job says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from contract import protocol
from contract.phases import Phase
from contract.protocol import StatusReport
from service.auth.access import Principal, Role
from service.jobs.models import TrainingJob
from service.jobs.schemas import JobCreate
from service.kit.db import session_scope, utcnow
from service.kit.protocol import as_message, validate_body
from service.settings import Settings
from service.training import service
from service.training.instance_messages import StatusReportBody
from tests.conftest import job_spec

# What tests that call the service layer directly act as: the bootstrap administrator.
SERVER_ADMIN = Principal(
    kind="user", name="admin", project="default", role=Role.ADMIN, server_admin=True
)


def submit(settings: Settings, source_dir: Path, **spec: Any) -> str:
    with session_scope(settings.database_url) as session:
        job = JobCreate.model_validate(job_spec(source_dir, **spec))
        return service.submit(session, settings, job, "default").name


def report(settings: Settings, name: str, host: str, phase: str, **fields: Any) -> None:
    """What the runtime on ``host`` would report."""
    sent = StatusReport(phase=Phase(phase), time=utcnow(), **fields)
    # As the route takes it: validated, long reasons cut to fit.
    body = json.dumps(protocol.body(sent), default=str).encode()
    sent = as_message(StatusReport, validate_body(StatusReportBody, body))
    with session_scope(settings.database_url) as session:
        job = named(session, name)
        service.record_report(session, settings, job, host, sent)


def job_state(settings: Settings, name: str) -> dict[str, Any]:
    with session_scope(settings.database_url) as session:
        job = named(session, name)
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


def job_id(settings: Settings, name: str) -> str:
    """The id of the job of that name: what the worker drives a job by."""
    with session_scope(settings.database_url) as session:
        return named(session, name).id


def named(session: Session, name: str) -> TrainingJob:
    """The job of that name, in whichever project (these tests give each job a name of its
    own)."""
    jobs = session.scalars(select(TrainingJob).where(TrainingJob.name == name)).all()
    assert len(jobs) == 1, (name, jobs)
    return jobs[0]


def job_dir(settings: Settings, name: str) -> Path:
    """Where the local backend keeps the job's instances (by job id)."""
    return settings.jobs_dir / job_id(settings, name)
