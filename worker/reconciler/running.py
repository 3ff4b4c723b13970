"""Watching a job whose instances are launched: what they report decides.

In order: a result the instances already reached (a job that finished before its deadline
or a spot notice ends Completed), a spot notice, a failed or lost instance, the job's time
budgets, instances still waiting to start (all or nothing, within the backend's start
timeout), and otherwise the phase of the slowest instance, shown as the job's.
"""

from __future__ import annotations

from datetime import timedelta

from contract.failure_causes import FailureCause
from contract.failures import instance_lost
from contract.phases import FINAL_PHASES, Phase
from provisioning.base import InstanceState, InstanceStatus
from service.jobs import lifecycle
from service.jobs.lifecycle import Event
from service.jobs.models import TrainingJob
from service.jobs.states import PHASE_ORDER
from service.kit.db import utcnow
from worker.reconciler import phases
from worker.reconciler.billing import working_seconds
from worker.reconciler.ending import drive_stop, finish, past_max_wait, stop_for, stop_for_max_wait
from worker.reconciler.restarts import drive_interruption, on_failure
from worker.reconciler.snapshot import JobSnapshot, Pass, Report
from worker.retry_policy import Failure


def observe(step: Pass, snapshot: JobSnapshot) -> None:
    # Read the backend before the reports: a runtime reports before it exits, so any
    # instance seen gone here has its last report already committed.
    statuses = step.backend.describe(snapshot.ref)
    reports = step.reports(snapshot)
    # What the instances already decided comes first: a job that finished before its
    # deadline, or before a spot notice came, ends Completed even if this pass only runs
    # after it.
    if completed(snapshot, statuses, reports):
        finish(step, snapshot, reports, Event.COMPLETED, None)
        return
    if snapshot.interruption_noticed_at is not None:
        drive_interruption(step, snapshot)
        return
    failure = first_failure(snapshot.hosts, statuses, reports)
    if failure is not None:
        on_failure(step, snapshot, reports, failure)
        return
    # Instances that never start must not hold their capacity past the job's budgets.
    if _out_of_time(step, snapshot, reports):
        return
    pending = {
        host: status
        for host, status in sorted((statuses or {}).items())
        if status.state == InstanceState.PENDING
    }
    if pending:
        _wait_for_instances(step, snapshot, reports, pending)
        return
    if snapshot.pending_reason is not None:
        snapshot = step.update(snapshot, _stop_waiting)
    _show_progress(step, snapshot, reports)


def completed(
    snapshot: JobSnapshot,
    statuses: dict[str, InstanceStatus] | None,
    reports: dict[str, Report],
) -> bool:
    master = reports.get(snapshot.hosts[0])
    # Under mpirun, the first instance's result is the job's: its mpirun ran every rank,
    # and the others only hosted a daemon, whatever they report of it. Unless one of them
    # is gone without a word: its ranks died with it, even if mpirun said all was well.
    if snapshot.mpi and master is not None and master.phase == Phase.COMPLETED:
        return not any(_gone_unreported(host, statuses, reports) for host in snapshot.hosts[1:])
    return all(
        host in reports and reports[host].phase == Phase.COMPLETED for host in snapshot.hosts
    )


def _gone_unreported(
    host: str, statuses: dict[str, InstanceStatus] | None, reports: dict[str, Report]
) -> bool:
    report = reports.get(host)
    if statuses is None or (report is not None and report.phase in FINAL_PHASES):
        return False
    status = statuses.get(host)
    return status is None or status.state not in (InstanceState.RUNNING, InstanceState.PENDING)


def first_failure(
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
            # As the backend read its signals (killed for using more memory than the
            # instance has, unable to start as the job asks, its node gone); lost where it
            # could tell nothing.
            cause = (status.cause if status is not None else None) or FailureCause.INSTANCE_LOST
            return Failure(
                cause=cause,
                reason=instance_lost(f"{host} ended without reporting a result{code}{why}{last}"),
                exit_code=exit_code,
            )
    failed = sorted(
        (r for r in reports.values() if r.phase in (Phase.FAILED, Phase.STOPPED)),
        # The first to fail is the one whose script ended first: its peers fail because
        # of it, and may report sooner (an instance first ends its other processes).
        key=lambda r: r.script_ended_at or r.training_ended_at or r.reported_at,
    )
    if not failed:
        return None
    first = failed[0]
    if first.phase == Phase.STOPPED:
        return Failure(
            cause=FailureCause.INSTANCE_STOPPED,
            reason=f"InstanceStopped: {first.host} was stopped from outside Runyard",
        )
    reason = first.failure_reason or f"{first.host} failed with exit code {first.exit_code}"
    # An instance may report itself lost (its network gone): not its script's failure. A
    # report stored before reports named a cause was given one as the database moved on;
    # none at all reads as the script's.
    cause = first.failure_cause or FailureCause.SCRIPT_ERROR
    return Failure(cause=cause, reason=reason, exit_code=first.exit_code)


def _out_of_time(step: Pass, snapshot: JobSnapshot, reports: dict[str, Report]) -> bool:
    """Stop the job if it is past max_wait (spot) or max_run; say whether it was."""
    if past_max_wait(snapshot):
        stopping = stop_for_max_wait(step, snapshot)
    else:
        # max_run bounds the time the instances worked, over every attempt: what the job
        # is billed for (SageMaker's MaxRuntimeInSeconds).
        if working_seconds(snapshot, reports, utcnow()) <= snapshot.spec.max_run:
            return False
        stopping = stop_for(
            step,
            snapshot,
            Event.MAX_RUNTIME_EXCEEDED,
            f"Stopping: the job ran longer than max_run ({snapshot.spec.max_run} s)",
        )
    drive_stop(step, stopping)
    return True


def _wait_for_instances(
    step: Pass,
    snapshot: JobSnapshot,
    reports: dict[str, Report],
    pending: dict[str, InstanceStatus],
) -> None:
    """All or nothing: every instance runs within the backend's start timeout, or the job
    fails naming why they wait, and whatever did start is removed with it."""
    count = len(snapshot.hosts)
    waited = utcnow() - (snapshot.launched_at or utcnow())
    timeout = step.backend.start_timeout
    # Instances that have their machine and are only starting (pulling an image) do not
    # wait for capacity: the start timeout is not theirs.
    unplaced = {host: s for host, s in pending.items() if not s.starting}
    if timeout is not None and unplaced and waited > timedelta(seconds=timeout):
        reason = (
            f"CapacityError: {len(unplaced)} of {count} instances were not running "
            f"{timeout:g} s after launch{_why(unplaced)}"
        )
        finish(step, snapshot, reports, Event.FAILED, reason)
        return
    message = f"Waiting for {len(pending)} of {count} instances{_why(pending)}"
    step.update(snapshot, lambda job: lifecycle.apply(job, Event.WAITING, message))


def _show_progress(step: Pass, snapshot: JobSnapshot, reports: dict[str, Report]) -> None:
    if not reports:
        return  # still launching
    # A host that has not reported yet is still downloading, so the job's phase never runs
    # ahead of its slowest instance and never goes back.
    running = [
        reports[host].phase if host in reports else Phase.DOWNLOADING
        for host in snapshot.hosts
        if host not in reports or reports[host].phase not in FINAL_PHASES
    ]
    if not running:
        return
    phase = min(running, key=PHASE_ORDER.__getitem__)
    if snapshot.secondary_status == phase:
        return
    started = [r.training_started_at for r in reports.values() if r.training_started_at]

    def progress(job: TrainingJob) -> None:
        # The job shows the phase of its slowest running instance, and each one before it
        # that this pass is the first to see.
        phases.record(job, reports, upto=phase)
        # As SageMaker's: the training job starts on its instances before they download.
        if job.training_start_time is None and started:
            job.training_start_time = min(started)

    step.update(snapshot, progress)


def _stop_waiting(job: TrainingJob) -> None:
    job.pending_reason = None


def _why(statuses: dict[str, InstanceStatus]) -> str:
    """The provider's words for each instance that has some, as ": algo-1: ...; ..."."""
    why = "; ".join(f"{host}: {s.reason}" for host, s in statuses.items() if s.reason)
    return f": {why}" if why else ""
