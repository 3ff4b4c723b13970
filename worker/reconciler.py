"""Drives each job from what the database says toward what its backend reports.

Level-triggered and idempotent: a pass reads the job afresh, asks the backend what exists,
and takes one step. Running it twice, late, or after a crash is harmless, which is what
lets broker messages be mere triggers. Side effects (starting or ending processes) happen
outside any transaction; writes check the job's version so a concurrent stop from the API
is never overwritten.

Order of a job's life::

    InProgress/Starting -> LaunchingInstances -> Downloading -> Training -> Uploading
        -> Completed | Failed            (the instances' reports decide)
    Stopping/(Stopping|MaxRuntimeExceeded) -> Stopped   (stop request or max_run)
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm.exc import StaleDataError

from runtime.launch import MPI_MODES
from service.auth.tokens import job_token
from service.jobs import repository
from service.jobs.models import JobInstance, TrainingJob
from service.jobs.schemas import JobCreate, host_names
from service.jobs.states import (
    FINAL_PHASES,
    PHASE_ORDER,
    STOP_REASONS,
    TERMINAL,
    Phase,
    Secondary,
    Status,
)
from service.kit.db import session_scope, utcnow
from service.logs import service as logs
from service.logs.schemas import LogLine
from service.settings import Settings
from worker.backends import registry
from worker.backends.base import (
    KILL_WAIT_SECONDS,
    Backend,
    InstanceState,
    InstanceStatus,
    JobRef,
    LaunchError,
    LaunchRequest,
    TeardownError,
)

log = logging.getLogger(__name__)

MAX_PASSES_PER_TASK = 20
MAX_CONSOLE_LINES = 5000
MAX_LINE = 16 * 1024

_PHASE_MESSAGES = {
    Phase.DOWNLOADING: "Downloading the code and input data",
    Phase.TRAINING: "Training in progress",
    Phase.UPLOADING: "Uploading the model",
}


class Superseded(Exception):
    """Someone else changed the job since this pass read it; the pass must start over."""


# Errors a pass leaves to the next pass (the sweep re-drives every live job): the job
# moved on under us, or the database itself is unreachable.
RETRIED = (Superseded, SQLAlchemyError)


@dataclass(frozen=True)
class Report:
    host: str
    phase: Phase
    exit_code: int | None
    failure_reason: str | None
    model_uri: str | None
    training_started_at: datetime | None
    training_ended_at: datetime | None
    reported_at: datetime

    @classmethod
    def of(cls, row: JobInstance) -> Report:
        return cls(
            row.host,
            Phase(row.phase),
            row.exit_code,
            row.failure_reason,
            row.model_uri,
            row.training_started_at,
            row.training_ended_at,
            row.reported_at,
        )


@dataclass(frozen=True)
class JobSnapshot:
    ref: JobRef
    version: int
    status: Status
    secondary: str
    spec: JobCreate
    backend: str
    launched_at: datetime | None
    stop_reason: str | None
    stop_signalled_at: datetime | None

    @classmethod
    def of(cls, job: TrainingJob) -> JobSnapshot:
        return cls(
            JobRef(job.id, job.name),
            job.version,
            Status(job.status),
            job.secondary_status,
            JobCreate.model_validate(job.spec),
            job.backend,
            job.launched_at,
            job.stop_reason,
            job.stop_signalled_at,
        )

    @property
    def hosts(self) -> list[str]:
        return host_names(self.spec.instance_count)

    @property
    def mpi(self) -> bool:
        return bool(MPI_MODES & set(self.spec.distribution.enabled_modes()))


class Reconciler:
    def __init__(
        self,
        settings: Settings,
        build_backend: Callable[[str, Settings], Backend[Any]] = registry.build,
    ) -> None:
        self.settings = settings
        self.database_url = settings.database_url
        self.build_backend = build_backend
        # The lease must outlast the longest pass (a teardown waiting out its grace, then
        # the SIGKILL wait), or a second worker could take over mid-teardown.
        self.lease_seconds = max(settings.reconcile_lease_seconds, _longest_pass(settings))

    # -- leasing ----------------------------------------------------------------------

    def reconcile(self, name: str) -> None:
        """Run passes over the job until nothing more is asked of it."""
        owner = uuid.uuid4().hex
        ttl = self.lease_seconds
        with session_scope(self.database_url) as session:
            # Ask first, then try to claim: if the holder lets go in between, we get the
            # lease; if it does not, it sees the request and runs another pass itself.
            repository.request_reconcile(session, name)
        with session_scope(self.database_url) as session:
            if not repository.claim_lease(session, name, owner, ttl):
                return
        try:
            for _ in range(MAX_PASSES_PER_TASK):
                with session_scope(self.database_url) as session:
                    if not repository.start_pass(session, name, owner, ttl):
                        return  # the lease lapsed and someone else took it
                try:
                    self.run_pass(name)
                except Superseded:
                    continue
                with session_scope(self.database_url) as session:
                    if repository.release_lease(session, name, owner):
                        return
        finally:
            with session_scope(self.database_url) as session:
                repository.drop_lease(session, name, owner)

    # -- one pass ---------------------------------------------------------------------

    def run_pass(self, name: str) -> None:
        snapshot = self._load(name)
        if snapshot is None:
            return
        backend = self.build_backend(snapshot.backend, self.settings)
        try:
            if snapshot.status == Status.STOPPING:
                self._drive_stop(snapshot, backend)
            elif snapshot.launched_at is None:
                self._launch(snapshot, backend)
            else:
                self._observe(snapshot, backend)
        except RETRIED:
            raise
        except LaunchError as exc:
            # The provider's refusal (capacity, a quota) is the reason, not a fault of ours.
            log.warning("launching %s was refused: %s", name, exc)
            self._fail(name, backend, f"LaunchError: {exc}", teardown=True)
        except Exception as exc:
            # Anything else is a fault of the backend or of this code: retrying blindly
            # could launch paid instances forever, so the job fails, saying why.
            log.exception("reconciling %s failed; failing the job", name)
            # A teardown that already failed would only fail again; the reason names what
            # was left behind.
            self._fail(
                name,
                backend,
                f"InternalServerError: {type(exc).__name__}: {exc}",
                teardown=not isinstance(exc, TeardownError),
            )

    def _fail(self, name: str, backend: Backend[Any], reason: str, *, teardown: bool) -> None:
        current = self._load(name)  # the step that failed may have moved the job on
        if current is not None:
            reports = self._reports(current)
            self._finish(
                current,
                backend,
                reports,
                Status.FAILED,
                Secondary.FAILED,
                reason[:1024],
                teardown=teardown,
            )

    def _launch(self, snapshot: JobSnapshot, backend: Backend[Any]) -> None:
        count = snapshot.spec.instance_count
        snapshot = self._update(
            snapshot,
            lambda job: repository.record_transition(
                job,
                Status.IN_PROGRESS,
                Secondary.LAUNCHING_INSTANCES,
                f"Launching {count} {snapshot.spec.instance_type} instance{'s' * (count > 1)}",
            ),
        )
        request = LaunchRequest(
            job=snapshot.ref,
            spec=snapshot.spec,
            service_url=self.settings.public_url,
            token=job_token(self.settings.signing_key(), snapshot.ref.id),
        )
        backend.submit(request)  # adopts what an earlier, interrupted attempt started
        now = utcnow()

        def launched(job: TrainingJob) -> None:
            job.launched_at = now

        self._update(snapshot, launched)

    def _observe(self, snapshot: JobSnapshot, backend: Backend[Any]) -> None:
        # Read the backend before the reports: a runtime reports before it exits, so any
        # instance seen gone here has its last report already committed.
        statuses = backend.describe(snapshot.ref)
        reports = self._reports(snapshot)
        # What the instances already decided comes first: a job that finished before its
        # deadline ends Completed or Failed even if this pass only runs after it.
        failure = _first_failure(snapshot.hosts, statuses, reports)
        if failure is not None:
            self._finish(snapshot, backend, reports, Status.FAILED, Secondary.FAILED, failure)
            return
        pending = {
            host: status
            for host, status in sorted((statuses or {}).items())
            if status.state == InstanceState.PENDING
        }
        if pending:
            self._wait_for_instances(snapshot, backend, reports, pending)
            return
        master = reports.get(snapshot.hosts[0])
        # Under mpirun, the first instance's result is the job's: its mpirun ran every rank,
        # and the others only hosted a daemon (which may have come and gone unseen).
        decided_by_master = snapshot.mpi and master is not None and master.phase == Phase.COMPLETED
        if decided_by_master or all(
            host in reports and reports[host].phase == Phase.COMPLETED for host in snapshot.hosts
        ):
            self._finish(snapshot, backend, reports, Status.COMPLETED, Secondary.COMPLETED, None)
            return
        launched_at = snapshot.launched_at or utcnow()
        if utcnow() - launched_at > timedelta(seconds=snapshot.spec.max_run):
            message = f"Stopping: the job ran longer than max_run ({snapshot.spec.max_run} s)"

            def stopping(job: TrainingJob) -> None:
                job.stop_reason = "MaxRuntimeExceeded"
                repository.record_transition(
                    job, Status.STOPPING, Secondary.MAX_RUNTIME_EXCEEDED, message
                )

            self._drive_stop(self._update(snapshot, stopping), backend)
            return
        self._show_progress(snapshot, reports)

    def _wait_for_instances(
        self,
        snapshot: JobSnapshot,
        backend: Backend[Any],
        reports: dict[str, Report],
        pending: dict[str, InstanceStatus],
    ) -> None:
        """All or nothing: every instance runs within the backend's start timeout, or the
        job fails naming why they wait, and whatever did start is removed with it."""
        count = len(snapshot.hosts)
        why = "; ".join(f"{host}: {s.reason}" for host, s in pending.items() if s.reason)
        waited = utcnow() - (snapshot.launched_at or utcnow())
        timeout = backend.start_timeout
        if timeout is not None and waited > timedelta(seconds=timeout):
            reason = (
                f"CapacityError: {len(pending)} of {count} instances were not running "
                f"{timeout:g} s after launch" + (f": {why}" if why else "")
            )
            self._finish(snapshot, backend, reports, Status.FAILED, Secondary.FAILED, reason)
            return
        message = f"Waiting for {len(pending)} of {count} instances" + (f": {why}" if why else "")

        def waiting(job: TrainingJob) -> None:
            if (
                not repository.record_transition(
                    job, Status.IN_PROGRESS, Secondary.PENDING, message
                )
                and job.transitions[-1].message != message
            ):
                # Still waiting, for a reason the scheduler has since made clearer.
                job.transitions[-1].message = message[:2048]

        self._update(snapshot, waiting)

    def _show_progress(self, snapshot: JobSnapshot, reports: dict[str, Report]) -> None:
        if not reports:
            return  # still launching
        # A host that has not reported yet is still downloading, so the job's phase never
        # runs ahead of its slowest instance and never goes back.
        running = [
            reports[host].phase if host in reports else Phase.DOWNLOADING
            for host in snapshot.hosts
            if host not in reports or reports[host].phase not in FINAL_PHASES
        ]
        if not running:
            return
        phase = min(running, key=PHASE_ORDER.__getitem__)
        if snapshot.secondary == phase:
            return
        started = [r.training_started_at for r in reports.values() if r.training_started_at]

        def progress(job: TrainingJob) -> None:
            repository.record_transition(job, Status.IN_PROGRESS, phase, _PHASE_MESSAGES[phase])
            if phase == Phase.TRAINING and job.training_start_time is None and started:
                job.training_start_time = min(started)

        self._update(snapshot, progress)

    def _drive_stop(self, snapshot: JobSnapshot, backend: Backend[Any]) -> None:
        if snapshot.stop_signalled_at is None:
            backend.cancel(snapshot.ref, force=False)
            now = utcnow()

            def signalled(job: TrainingJob) -> None:
                job.stop_signalled_at = now

            snapshot = self._update(snapshot, signalled)
        signalled_at = snapshot.stop_signalled_at or utcnow()
        statuses = backend.describe(snapshot.ref) or {}
        running = any(s.state == InstanceState.RUNNING for s in statuses.values())
        grace = timedelta(seconds=self.settings.stop_grace_seconds)
        if running and utcnow() - signalled_at < grace:
            return  # give the scripts their grace period; the sweep comes back
        reports = self._reports(snapshot)
        secondary = STOP_REASONS.get(snapshot.stop_reason or "", Secondary.STOPPED)
        self._finish(snapshot, backend, reports, Status.STOPPED, secondary, None)

    def _finish(
        self,
        snapshot: JobSnapshot,
        backend: Backend[Any],
        reports: dict[str, Report],
        status: Status,
        secondary: Secondary,
        failure_reason: str | None,
        *,
        teardown: bool = True,
    ) -> None:
        # Nothing of the job may be left once it reads as ended.
        if teardown:
            self._keep_consoles(snapshot, backend)
            backend.teardown(snapshot.ref)
        now = utcnow()
        master = reports.get(snapshot.hosts[0])
        started = [r.training_started_at for r in reports.values() if r.training_started_at]
        ended = [r.training_ended_at for r in reports.values() if r.training_ended_at]
        message = {
            Status.COMPLETED: "Training job completed",
            Status.FAILED: f"Training job failed: {(failure_reason or '')[:200]}",
            Status.STOPPED: "Training job stopped",
        }[status]

        def finished(job: TrainingJob) -> None:
            repository.record_transition(job, status, secondary, message, now)
            job.failure_reason = failure_reason
            job.model_artifacts = master.model_uri if master else None
            job.ended_at = now
            # A short job may end before any pass saw it training.
            if job.training_start_time is None and started:
                job.training_start_time = min(started)
            if job.training_start_time is not None:
                job.training_end_time = max(ended) if ended else now
            if job.launched_at is not None:
                job.billable_seconds = math.ceil((now - job.launched_at).total_seconds())

        self._update(snapshot, finished)

    def _keep_consoles(self, snapshot: JobSnapshot, backend: Backend[Any]) -> None:
        """Store what an instance printed, if it never shipped a line itself (a runtime
        that could not reach the service): once the instance is removed, it is gone."""
        consoles = backend.console(snapshot.ref)
        now = utcnow()
        with session_scope(self.database_url) as session:
            for host, text in sorted(consoles.items()):
                if not text.strip() or logs.has_lines(session, snapshot.ref.id, host):
                    continue
                lines = text.splitlines()[-MAX_CONSOLE_LINES:]
                logs.ingest(
                    session,
                    snapshot.ref.id,
                    host,
                    [
                        LogLine(seq=seq, time=now, stream="runtime", message=line[:MAX_LINE])
                        for seq, line in enumerate(lines, start=1)
                    ],
                )

    # -- reading and writing ----------------------------------------------------------

    def _load(self, name: str) -> JobSnapshot | None:
        """The job as it is now, or None once it has ended (or never existed)."""
        with session_scope(self.database_url) as session:
            job = repository.get(session, name)
            if job is None or job.status in TERMINAL:
                return None
            return JobSnapshot.of(job)

    def _reports(self, snapshot: JobSnapshot) -> dict[str, Report]:
        with session_scope(self.database_url) as session:
            rows = repository.instances(session, snapshot.ref.id)
            return {row.host: Report.of(row) for row in rows}

    def _update(
        self, snapshot: JobSnapshot, change: Callable[[TrainingJob], object]
    ) -> JobSnapshot:
        """Apply ``change`` to the job unless it moved on since ``snapshot`` was taken."""
        try:
            with session_scope(self.database_url) as session:
                job = repository.get(session, snapshot.ref.name, with_details=True)
                if job is None or job.version != snapshot.version:
                    raise Superseded
                change(job)
                session.flush()
                return JobSnapshot.of(job)
        except StaleDataError as exc:
            raise Superseded from exc


def _longest_pass(settings: Settings) -> float:
    """How long one pass may take, at most: a teardown that waits out every grace period
    of the slowest backend this server uses, then a margin."""
    used = set(settings.backends.values())
    local = settings.teardown_grace_seconds + KILL_WAIT_SECONDS
    waits = [local]
    if "kubernetes" in used:  # pods get the stop grace, then teardown's own, then a kill
        waits.append(settings.stop_grace_seconds + local)
    if "ec2" in used:
        waits.append(settings.ec2.teardown_timeout_seconds)
    return max(waits) + 5.0


def _first_failure(
    hosts: list[str], statuses: dict[str, InstanceStatus] | None, reports: dict[str, Report]
) -> str | None:
    """Why the job failed, from the earliest failing instance, or None if none failed."""
    failed = sorted(
        (r for r in reports.values() if r.phase in (Phase.FAILED, Phase.STOPPED)),
        key=lambda r: r.training_ended_at or r.reported_at,
    )
    if failed:
        first = failed[0]
        if first.phase == Phase.STOPPED:
            return f"InstanceStopped: {first.host} was stopped from outside Runyard"
        return first.failure_reason or f"{first.host} failed with exit code {first.exit_code}"
    for host in hosts:
        status = (statuses or {}).get(host)
        report = reports.get(host)
        if report is not None and report.phase in FINAL_PHASES:
            continue
        if status is None or status.state not in (InstanceState.RUNNING, InstanceState.PENDING):
            code = (
                ""
                if status is None or status.exit_code is None
                else f" (exit code {status.exit_code})"
            )
            why = f" ({status.reason})" if status and status.reason else ""
            last = (
                f"; last output: {status.last_output[-600:]}"
                if status and status.last_output
                else ""
            )
            return f"InstanceLost: {host} ended without reporting a result{code}{why}{last}"
    return None
