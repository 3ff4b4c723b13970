"""A job as one reconcile pass sees it: a snapshot read in a short transaction, its stage
among it, and the writes that check the snapshot is still current.

Side effects (starting or ending instances) happen between transactions, never inside one;
every write checks the job's version, so a concurrent stop from the API is never
overwritten: the pass that finds the job moved on (``Superseded``) starts over.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any, Literal, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm.exc import StaleDataError

from contract import modes
from contract.failure_causes import FailureCause
from contract.hosts import host_names
from contract.phases import Phase
from provisioning.base import Backend, JobRef
from service.grants import service as grants
from service.grants.service import InstanceRoots
from service.jobs import repository
from service.jobs.models import JobInstance, TrainingJob
from service.jobs.record import JobRecord
from service.jobs.states import TERMINAL, Stage, Status
from service.kit.db import session_scope
from service.settings import Settings

RestartKind = Literal["application", "infrastructure", "interruption", "capacity"]


class Superseded(Exception):
    """Someone else changed the job since this pass read it; the pass must start over."""


# Errors a pass leaves to the next pass (the sweep re-drives every live job): the job
# moved on under us, or the database itself is unreachable.
RETRIED = (Superseded, SQLAlchemyError)


@dataclass(frozen=True)
class Report:
    """What the runtime of one instance last reported (a ``JobInstance`` row)."""

    host: str
    phase: Phase
    exit_code: int | None
    failure_reason: str | None
    model_uri: str | None
    training_started_at: datetime | None
    training_ended_at: datetime | None
    script_ended_at: datetime | None
    training_reported_at: datetime | None
    uploading_reported_at: datetime | None
    reported_at: datetime
    # Why a Failed instance failed, as its runtime said.
    failure_cause: FailureCause | None = None


@dataclass(frozen=True)
class RestartCause:
    """Why the job is restarting, kept in the job while the restart is under way."""

    # "capacity": a spot launch found no capacity; the job waits and tries again.
    kind: RestartKind
    reason: str
    # Not before this (ISO time): the back-off of an application retry, or when a spot
    # launch tries again.
    not_before: str
    # Set once the attempt's instances are gone and its time has been billed.
    torn_down: bool = False

    @classmethod
    def load(cls, text: str | None) -> RestartCause | None:
        return cls(**json.loads(text)) if text else None

    def dump(self) -> str:
        return json.dumps(asdict(self))


@dataclass(frozen=True)
class JobSnapshot:
    """The job's columns a pass decides by; those named as the columns are copied as they
    are (``_from_row``), the others converted."""

    ref: JobRef
    version: int
    # Whose data the job may use (service.grants).
    project: str
    # Where the job is in its life (``service.jobs.lifecycle``): which handler drives it.
    stage: Stage
    status: Status
    secondary_status: str
    spec: JobRecord
    backend: str
    launched_at: datetime | None
    stop_reason: str | None
    stop_signalled_at: datetime | None
    created_at: datetime
    admitted_at: datetime | None
    restarts: int
    infrastructure_restarts: int
    interruptions: int
    attempt_first_log_seq: int
    pending_reason: str | None
    restart_cause: RestartCause | None
    interruption_noticed_at: datetime | None
    interruption_message: str | None
    # Seconds the instances worked in earlier attempts.
    worked_seconds: float
    # The image an earlier launch decided the instances run, and why not the spec's: a
    # relaunch keeps it.
    launched_image: str | None
    launched_image_note: str | None

    @property
    def hosts(self) -> list[str]:
        return host_names(self.spec.instance_count)

    @property
    def mpi(self) -> bool:
        """Whether mpirun on the first instance runs every rank (its result is the job's)."""
        return any(mode.uses_mpi for mode in modes.enabled_modes(self.spec.distribution.as_dict()))


def snapshot_of(job: TrainingJob) -> JobSnapshot:
    return _from_row(
        JobSnapshot,
        job,
        ref=JobRef(job.id, job.name, job.attempt),
        stage=Stage(job.stage),
        status=Status(job.status),
        spec=job.record,
        restart_cause=RestartCause.load(job.restart_cause),
        worked_seconds=job.worked_seconds or 0.0,
    )


def report_of(row: JobInstance) -> Report:
    return _from_row(Report, row, phase=Phase(row.phase), failure_cause=_cause(row.failure_cause))


def _cause(stored: str | None) -> FailureCause | None:
    try:
        return FailureCause(stored) if stored else None
    except ValueError:
        return None  # a cause this release does not know (a newer service's): none given


_Snapshot = TypeVar("_Snapshot", JobSnapshot, Report)


def _from_row(cls: type[_Snapshot], row: object, **converted: Any) -> _Snapshot:
    """A snapshot of ``row``: each field not in ``converted`` is the column of its name."""
    copied = {
        item.name: getattr(row, item.name) for item in fields(cls) if item.name not in converted
    }
    return cls(**copied, **converted)


def load(database_url: str, job_id: str) -> JobSnapshot | None:
    """The job as it is now, or None once it has ended (or never existed)."""
    # Read-only: on SQLite it does not wait for (or hold up) the API's writes.
    with session_scope(database_url, readonly=True) as session:
        job = repository.get_by_id(session, job_id)
        if job is None or job.status in TERMINAL:
            return None
        return snapshot_of(job)


@dataclass(frozen=True)
class Pass:
    """One pass over one job: the server's settings, the job's backend, and the job's
    reads and writes, each a short transaction of its own."""

    settings: Settings
    backend: Backend[Any]

    def load(self, job_id: str) -> JobSnapshot | None:
        return load(self.settings.database_url, job_id)

    def instance_roots(self, snapshot: JobSnapshot) -> InstanceRoots:
        """Where the job's instances hold its file:// URIs, as its project's places are
        granted now."""
        with session_scope(self.settings.database_url, readonly=True) as session:
            places = grants.places(session, self.settings, snapshot.project)
        return grants.instance_roots(self.settings, places)

    def reports(self, snapshot: JobSnapshot) -> dict[str, Report]:
        with session_scope(self.settings.database_url, readonly=True) as session:
            rows = repository.instances(session, snapshot.ref.id)
            return {row.host: report_of(row) for row in rows}

    def update(self, snapshot: JobSnapshot, change: Callable[[TrainingJob], object]) -> JobSnapshot:
        """Apply ``change`` to the job unless it moved on since ``snapshot`` was taken."""
        try:
            with session_scope(self.settings.database_url) as session:
                job = repository.get_to_change(session, snapshot.ref.id)
                if job is None or job.version != snapshot.version:
                    raise Superseded
                change(job)
                session.flush()
                return snapshot_of(job)
        except StaleDataError as exc:
            raise Superseded from exc
