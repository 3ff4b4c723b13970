"""Drives each job from what the database says toward what its backend reports.

Level-triggered and idempotent: a pass reads the job afresh, asks the backend what exists,
and takes one step. Running it twice, late, or after a crash is harmless, which is what
lets broker messages be mere triggers. Side effects (starting or ending processes) happen
outside any transaction; writes check the job's version so a concurrent stop from the API
is never overwritten.

Order of a job's life::

    InProgress/Starting -> [Pending: waiting for capacity] -> LaunchingInstances
        -> Downloading -> Training -> Uploading
        -> Completed | Failed            (the instances' reports decide)
    ... -> Restarting | Interrupted -> (tear down, back off) -> [Pending] -> Launching...
                                         (a retried failure, a spot interruption)
    Stopping/(Stopping|MaxRuntimeExceeded|MaxWaitTimeExceeded) -> Stopped

Each start of the instances is an attempt. A restart first records why (so a crash
halfway resumes the restart instead of deciding anew), then tears every instance down,
then begins the next attempt, which resumes from the job's latest checkpoint.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import object_session
from sqlalchemy.orm.exc import StaleDataError

from runtime.launch import MPI_MODES
from service.auth.tokens import job_token
from service.capacity import service as capacity
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
from service.kit.text import without_nul
from service.logs import service as logs
from service.logs.schemas import LogLine
from service.settings import Settings
from worker import retry_policy
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
from worker.retry_policy import Failure

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
class RestartCause:
    """Why the job is restarting, kept in the job while the restart is under way."""

    # "capacity": a spot launch found no capacity; the job waits and tries again.
    kind: Literal["application", "infrastructure", "interruption", "capacity"]
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
    ref: JobRef
    version: int
    status: Status
    secondary: str
    spec: JobCreate
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
    # Seconds on instances in earlier attempts.
    billable_seconds: int

    @classmethod
    def of(cls, job: TrainingJob) -> JobSnapshot:
        return cls(
            JobRef(job.id, job.name, job.attempt),
            job.version,
            Status(job.status),
            job.secondary_status,
            JobCreate.model_validate(job.spec),
            job.backend,
            job.launched_at,
            job.stop_reason,
            job.stop_signalled_at,
            job.created_at,
            job.admitted_at,
            job.restarts,
            job.infrastructure_restarts,
            job.interruptions,
            job.attempt_first_log_seq,
            job.pending_reason,
            RestartCause.load(job.restart_cause),
            job.interruption_noticed_at,
            job.interruption_message,
            job.billable_seconds or 0,
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
        # While instances run, _observe weighs max_wait after what they reported (a job that
        # completed in time is not stopped); otherwise it is weighed here.
        running = snapshot.launched_at is not None and snapshot.restart_cause is None
        try:
            if snapshot.status != Status.STOPPING and not running and _past_max_wait(snapshot):
                snapshot = self._stop_for_max_wait(snapshot)
            if snapshot.status == Status.STOPPING:
                self._drive_stop(snapshot, backend)
            elif snapshot.restart_cause is not None:
                self._continue_restart(snapshot, backend)
            elif snapshot.admitted_at is None:
                self._admit(snapshot, backend)
            elif snapshot.launched_at is None:
                self._launch(snapshot, backend)
            else:
                self._observe(snapshot, backend)
        except RETRIED:
            raise
        except LaunchError as exc:
            # The provider's refusal (capacity, a quota) is the reason, not a fault of ours.
            log.warning("launching %s was refused: %s", name, exc)
            if exc.capacity and snapshot.spec.use_spot_instances:
                self._await_spot_capacity(name, backend, exc)
            else:
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
                reason,
                teardown=teardown,
            )

    def _await_spot_capacity(self, name: str, backend: Backend[Any], exc: LaunchError) -> None:
        """No spot capacity now: give back what was taken, wait, then launch again (a new
        attempt, so nothing of this one is adopted), within max_wait."""
        current = self._load(name)
        if current is not None:
            delay = self.settings.spot_capacity_retry_seconds
            self._begin_restart(
                current,
                backend,
                "capacity",
                f"No spot capacity: {exc}; trying again in {delay:g} s",
                delay=delay,
            )

    def _admit(self, snapshot: JobSnapshot, backend: Backend[Any]) -> None:
        """Take the job's instances from the capacity, all together, or wait in line."""
        settings = self.settings
        spec = snapshot.spec

        def admit(job: TrainingJob) -> None:
            session = object_session(job)
            bounded = capacity.limited(settings, spec.instance_type, job.tenant)
            if session is None or not bounded:
                verdict = capacity.Admission(True)
            else:
                verdict = capacity.decide(session, settings, job)
            if verdict.admitted:
                job.admitted_at = utcnow()
                job.pending_reason = None
            else:
                _wait(job, verdict.reason)

        snapshot = self._update(snapshot, admit)
        if snapshot.admitted_at is not None:
            self._launch(snapshot, backend)

    def _launch(self, snapshot: JobSnapshot, backend: Backend[Any]) -> None:
        count = snapshot.spec.instance_count
        attempt = snapshot.ref.attempt
        message = f"Launching {count} {snapshot.spec.instance_type} instance{'s' * (count > 1)}"
        if attempt:
            resuming = ", resuming from the latest checkpoint" * bool(
                snapshot.spec.checkpoint_s3_uri
            )
            message += f" (attempt {attempt + 1}{resuming})"

        def launching(job: TrainingJob) -> None:
            repository.record_transition(
                job, Status.IN_PROGRESS, Secondary.LAUNCHING_INSTANCES, message
            )
            job.pending_reason = None

        snapshot = self._update(snapshot, launching)
        request = LaunchRequest(
            job=snapshot.ref,
            spec=snapshot.spec,
            service_url=self.settings.public_url,
            token=job_token(self.settings.signing_key(), snapshot.ref.id),
            first_log_seq=snapshot.attempt_first_log_seq,
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
        # deadline, or before a spot notice came, ends Completed even if this pass only
        # runs after it.
        if _completed(snapshot, reports):
            self._finish(snapshot, backend, reports, Status.COMPLETED, Secondary.COMPLETED, None)
            return
        if snapshot.interruption_noticed_at is not None:
            self._drive_interruption(snapshot, backend)
            return
        failure = _first_failure(snapshot.hosts, statuses, reports)
        if failure is not None:
            self._on_failure(snapshot, backend, reports, failure)
            return
        # Instances that never start must not hold their capacity past the job's budgets.
        if self._out_of_time(snapshot, backend):
            return
        pending = {
            host: status
            for host, status in sorted((statuses or {}).items())
            if status.state == InstanceState.PENDING
        }
        if pending:
            self._wait_for_instances(snapshot, backend, reports, pending)
            return
        if snapshot.pending_reason is not None:
            snapshot = self._update(snapshot, _stop_waiting)
        self._show_progress(snapshot, reports)

    def _out_of_time(self, snapshot: JobSnapshot, backend: Backend[Any]) -> bool:
        """Stop the job if it is past max_wait (spot) or max_run; say whether it was."""
        if _past_max_wait(snapshot):
            stopping = self._stop_for_max_wait(snapshot)
        else:
            # max_run bounds the time on instances, over every attempt.
            launched_at = snapshot.launched_at or utcnow()
            ran = snapshot.billable_seconds + (utcnow() - launched_at).total_seconds()
            if ran <= snapshot.spec.max_run:
                return False
            stopping = self._stop_for(
                snapshot,
                "MaxRuntimeExceeded",
                Secondary.MAX_RUNTIME_EXCEEDED,
                f"Stopping: the job ran longer than max_run ({snapshot.spec.max_run} s)",
            )
        self._drive_stop(stopping, backend)
        return True

    def _stop_for_max_wait(self, snapshot: JobSnapshot) -> JobSnapshot:
        return self._stop_for(
            snapshot,
            "MaxWaitTimeExceeded",
            Secondary.MAX_WAIT_TIME_EXCEEDED,
            f"Stopping: the job took longer than max_wait ({snapshot.spec.max_wait} s), "
            "waiting for spot capacity included",
        )

    def _stop_for(
        self, snapshot: JobSnapshot, reason: str, secondary: Secondary, message: str
    ) -> JobSnapshot:
        def stopping(job: TrainingJob) -> None:
            job.stop_reason = reason
            job.pending_reason = None
            repository.record_transition(job, Status.STOPPING, secondary, message)

        return self._update(snapshot, stopping)

    # -- restarts ---------------------------------------------------------------------

    def _on_failure(
        self,
        snapshot: JobSnapshot,
        backend: Backend[Any],
        reports: dict[str, Report],
        failure: Failure,
    ) -> None:
        verdict = retry_policy.decide(
            failure,
            snapshot.spec,
            restarts=snapshot.restarts,
            # Spot interruptions are bounded by max_wait, not by this budget.
            infrastructure_restarts=snapshot.infrastructure_restarts - snapshot.interruptions,
            max_infrastructure_restarts=self.settings.max_infrastructure_restarts,
        )
        if not verdict.retry:
            self._finish(
                snapshot, backend, reports, Status.FAILED, Secondary.FAILED, verdict.reason
            )
            return
        kind: Literal["application", "infrastructure"] = (
            "infrastructure" if failure.infrastructure else "application"
        )
        self._begin_restart(snapshot, backend, kind, failure.reason)

    def _drive_interruption(self, snapshot: JobSnapshot, backend: Backend[Any]) -> None:
        """A spot notice: the scripts get SIGTERM and the grace to save a checkpoint, then
        the instances go and the job waits for capacity to resume."""
        notice = snapshot.interruption_message or "spot capacity reclaimed"
        grace = self.settings.spot_grace_seconds
        if snapshot.stop_signalled_at is None:
            backend.cancel(snapshot.ref, force=False, grace_seconds=grace)
            now = utcnow()

            def signalled(job: TrainingJob) -> None:
                job.stop_signalled_at = now
                repository.record_transition(
                    job,
                    Status.IN_PROGRESS,
                    Secondary.INTERRUPTED,
                    f"Spot interruption: {notice}; the scripts got SIGTERM and {grace:g} s "
                    "to save a checkpoint",
                )

            snapshot = self._update(snapshot, signalled)
        statuses = backend.describe(snapshot.ref) or {}
        running = any(s.state == InstanceState.RUNNING for s in statuses.values())
        signalled_at = snapshot.stop_signalled_at or utcnow()
        if running and utcnow() - signalled_at < timedelta(seconds=grace):
            return  # the sweep comes back
        self._begin_restart(snapshot, backend, "interruption", f"Spot interruption: {notice}")

    def _begin_restart(
        self,
        snapshot: JobSnapshot,
        backend: Backend[Any],
        kind: Literal["application", "infrastructure", "interruption", "capacity"],
        reason: str,
        *,
        delay: float = 0.0,
    ) -> None:
        settings = self.settings
        if kind == "application":
            delay = retry_policy.backoff_seconds(
                snapshot.restarts,
                settings.restart_backoff_seconds,
                settings.restart_backoff_max_seconds,
            )
        not_before = (utcnow() + timedelta(seconds=delay)).isoformat()
        cause = RestartCause(kind, reason[:1024], not_before)

        def restarting(job: TrainingJob) -> None:
            job.restart_cause = cause.dump()
            if kind == "capacity":
                _wait(job, reason)
                return
            if kind == "application":
                job.restarts += 1
                count = f"retry {job.restarts} of {snapshot.spec.max_retry_attempts}"
                message = f"Restarting ({count}) after: {reason}"
            else:
                job.infrastructure_restarts += 1
                if kind == "interruption":
                    job.interruptions += 1
                    message = f"{reason}; the job resumes when spot capacity is back"
                else:
                    message = (
                        f"Restarting after an infrastructure failure "
                        f"({job.infrastructure_restarts} of "
                        f"{settings.max_infrastructure_restarts}): {reason}"
                    )
            secondary = Secondary.INTERRUPTED if kind == "interruption" else Secondary.RESTARTING
            # An interruption's transition began with its notice, which it keeps.
            repository.record_transition(job, Status.IN_PROGRESS, secondary, message)

        self._continue_restart(self._update(snapshot, restarting), backend)

    def _continue_restart(self, snapshot: JobSnapshot, backend: Backend[Any]) -> None:
        """Tear the attempt down, wait out its back-off, and begin the next attempt."""
        cause = snapshot.restart_cause
        assert cause is not None
        if not cause.torn_down:
            self._keep_consoles(snapshot, backend)
            backend.teardown(snapshot.ref)
            ended = utcnow()

            def torn_down(job: TrainingJob) -> None:
                _bill_attempt(job, ended)
                job.restart_cause = replace(cause, torn_down=True).dump()

            snapshot = self._update(snapshot, torn_down)
        wait = (datetime.fromisoformat(cause.not_before) - utcnow()).total_seconds()
        if wait > 0:
            if cause.kind != "capacity":  # which says when it tries again itself
                message = f"Restarting in {math.ceil(wait)} s (back-off after a failed attempt)"

                def backing_off(job: TrainingJob) -> None:
                    job.pending_reason = message

                self._update(snapshot, backing_off)
            return

        def next_attempt(job: TrainingJob) -> None:
            session = object_session(job)
            assert session is not None
            # Every line of the attempt before is stored by now (its instances are gone):
            # the next attempt's lines are numbered on from them.
            job.attempt_first_log_seq = logs.last_seq(session, job.id) + 1
            job.attempt += 1
            job.restart_cause = None
            job.launched_at = None
            job.stop_signalled_at = None
            job.interruption_noticed_at = None
            job.interruption_message = None
            job.progress_first = job.progress_first_at = None
            job.progress = job.progress_at = None
            job.pending_reason = None
            job.instances.clear()  # the new attempt's instances report afresh
            if cause.kind in ("interruption", "capacity"):
                job.admitted_at = None  # the instances went back: queue for capacity again

        snapshot = self._update(snapshot, next_attempt)
        if snapshot.admitted_at is None:
            self._admit(snapshot, backend)
        else:
            self._launch(snapshot, backend)

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
        waited = utcnow() - (snapshot.launched_at or utcnow())
        timeout = backend.start_timeout
        # Instances that have their machine and are only starting (pulling an image) do
        # not wait for capacity: the start timeout is not theirs.
        unplaced = {host: s for host, s in pending.items() if not s.starting}
        if timeout is not None and unplaced and waited > timedelta(seconds=timeout):
            reason = (
                f"CapacityError: {len(unplaced)} of {count} instances were not running "
                f"{timeout:g} s after launch{_why(unplaced)}"
            )
            self._finish(snapshot, backend, reports, Status.FAILED, Secondary.FAILED, reason)
            return
        message = f"Waiting for {len(pending)} of {count} instances{_why(pending)}"
        self._update(snapshot, lambda job: _wait(job, message))

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
            job.pending_reason = None
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
        if failure_reason is not None:
            failure_reason = without_nul(failure_reason)[: retry_policy.MAX_REASON]
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
            _bill_attempt(job, now)
            if snapshot.spec.use_spot_instances and job.billable_seconds:
                job.spot_savings_percent = round(100 * (1 - self.settings.spot_price_ratio), 1)
            job.pending_reason = None
            job.restart_cause = None

        self._update(snapshot, finished)

    def _keep_consoles(self, snapshot: JobSnapshot, backend: Backend[Any]) -> None:
        """Store what an instance printed, if it never shipped a line itself (a runtime
        that could not reach the service): once the instance is removed, it is gone."""
        # Best effort: what cannot be kept must never keep the instances from going.
        try:
            consoles = backend.console(snapshot.ref)
            now = utcnow()
            first = snapshot.attempt_first_log_seq
            with session_scope(self.database_url) as session:
                for host, text in sorted(consoles.items()):
                    if not text.strip() or logs.has_lines(session, snapshot.ref.id, host, first):
                        continue
                    lines = text.splitlines()[-MAX_CONSOLE_LINES:]
                    start = max(first, logs.last_seq(session, snapshot.ref.id) + 1)
                    logs.ingest(
                        session,
                        snapshot.ref.id,
                        host,
                        [
                            LogLine(seq=seq, time=now, stream="runtime", message=line[:MAX_LINE])
                            for seq, line in enumerate(lines, start=start)
                        ],
                    )
        except (Superseded, OperationalError):
            raise  # the database is away for now: the next pass keeps them
        except Exception:
            log.exception("keeping the consoles of %s failed", snapshot.ref.name)

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


def _why(statuses: dict[str, InstanceStatus]) -> str:
    """The provider's words for each instance that has some, as ": algo-1: ...; ..."."""
    why = "; ".join(f"{host}: {s.reason}" for host, s in statuses.items() if s.reason)
    return f": {why}" if why else ""


def _completed(snapshot: JobSnapshot, reports: dict[str, Report]) -> bool:
    master = reports.get(snapshot.hosts[0])
    # Under mpirun, the first instance's result is the job's: its mpirun ran every rank,
    # and the others only hosted a daemon (which may have come and gone unseen).
    if snapshot.mpi and master is not None and master.phase == Phase.COMPLETED:
        return True
    return all(
        host in reports and reports[host].phase == Phase.COMPLETED for host in snapshot.hosts
    )


def _stop_waiting(job: TrainingJob) -> None:
    job.pending_reason = None


def _wait(job: TrainingJob, message: str) -> None:
    """The job waits (for capacity, for its instances), saying why; a changed reason
    updates the current transition rather than adding one."""
    message = without_nul(message)
    job.pending_reason = message[:2048]
    if (
        not repository.record_transition(job, Status.IN_PROGRESS, Secondary.PENDING, message)
        and job.transitions[-1].message != message
    ):
        job.transitions[-1].message = message[:2048]


def _bill_attempt(job: TrainingJob, ended: datetime) -> None:
    """Add the attempt's time on instances to the job's, once: the attempt is then over."""
    if job.launched_at is not None:
        seconds = math.ceil((ended - job.launched_at).total_seconds())
        job.billable_seconds = (job.billable_seconds or 0) + seconds
        job.launched_at = None


def _past_max_wait(snapshot: JobSnapshot) -> bool:
    budget = snapshot.spec.max_wait
    return (
        snapshot.spec.use_spot_instances
        and budget is not None
        and utcnow() - snapshot.created_at > timedelta(seconds=budget)
    )


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
) -> Failure | None:
    """Why the attempt failed, or None if no instance failed.

    A lost instance is looked at first: when one vanishes, its peers' scripts fail too
    (their collectives lose a member), and the cause is the infrastructure's, not theirs.
    """
    for host in hosts:
        status = (statuses or {}).get(host)
        report = reports.get(host)
        if report is not None and report.phase in FINAL_PHASES:
            continue
        if status is None or status.state not in (InstanceState.RUNNING, InstanceState.PENDING):
            exit_code = status.exit_code if status is not None else None
            code = "" if exit_code is None else f" (exit code {exit_code})"
            why = f" ({status.reason})" if status and status.reason else ""
            last = (
                f"; last output: {status.last_output[-600:]}"
                if status and status.last_output
                else ""
            )
            return Failure(
                # Killed for using more memory than the instance has, or unable to start
                # as the job asks: the job's doing, and a restart would only do it again.
                infrastructure=not (
                    status is not None and (status.job_caused or "OOMKilled" in status.reason)
                ),
                reason=f"InstanceLost: {host} ended without reporting a result{code}{why}{last}",
                exit_code=exit_code,
            )
    failed = sorted(
        (r for r in reports.values() if r.phase in (Phase.FAILED, Phase.STOPPED)),
        key=lambda r: r.training_ended_at or r.reported_at,
    )
    if not failed:
        return None
    first = failed[0]
    if first.phase == Phase.STOPPED:
        return Failure(
            infrastructure=True,
            reason=f"InstanceStopped: {first.host} was stopped from outside Runyard",
        )
    reason = first.failure_reason or f"{first.host} failed with exit code {first.exit_code}"
    return Failure(infrastructure=False, reason=reason, exit_code=first.exit_code)
