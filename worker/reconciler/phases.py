"""The phases a job went through, recorded as its secondary-status history.

The instances report Downloading, Training and (the first instance) Uploading as they reach
them, and a pass may see only the last: a job that downloads, trains and uploads between
two passes would skip from LaunchingInstances to Completed. So every phase that one of its
instances went through in this attempt is recorded, in order, at the time the last of the
instances that went through it reached it (their reports' times, never before the history's
last entry), as SageMaker's SecondaryStatusTransitions list them however short each was.
"""

from __future__ import annotations

from datetime import datetime

from contract.phases import Phase
from service.jobs import lifecycle
from service.jobs.lifecycle import Event
from service.jobs.models import TrainingJob
from service.jobs.states import Secondary, Stage
from service.kit.db import utcnow
from worker.reconciler.snapshot import Report

# The phases in the order an instance goes through them, each with the event that shows it.
PHASE_EVENTS: dict[Phase, tuple[Event, str]] = {
    Phase.DOWNLOADING: (Event.DOWNLOADING, "Downloading the code and input data"),
    Phase.TRAINING: (Event.TRAINING, "Training in progress"),
    Phase.UPLOADING: (Event.UPLOADING, "Uploading the model"),
}
_ORDER = list(PHASE_EVENTS)


def reached(report: Report, phase: Phase) -> datetime | None:
    """When the instance was at ``phase``, or None if it never was. An instance goes through
    the phases in order: one that completed trained, even if that report was lost."""
    if phase == Phase.DOWNLOADING:
        return report.training_started_at
    if phase == Phase.TRAINING:
        if report.training_reported_at is not None:
            return report.training_reported_at
        if report.phase in (Phase.UPLOADING, Phase.COMPLETED):
            return report.script_ended_at or report.reported_at
        return None
    if phase == Phase.UPLOADING:
        return report.uploading_reported_at
    return None


def record(job: TrainingJob, reports: dict[str, Report], upto: Phase | None = None) -> None:
    """Record, on a running job, each phase its instances went through that its history
    lacks, up to ``upto`` (None: all of them, as the job ends)."""
    if job.stage != Stage.RUNNING:
        return
    shown = _shown_this_attempt(job)
    last = max((_ORDER.index(Phase(s)) for s in shown if s in PHASE_EVENTS), default=-1)
    for index, phase in enumerate(_ORDER):
        if index <= last or (upto is not None and index > _ORDER.index(upto)):
            continue
        times = [at for report in reports.values() if (at := reached(report, phase))]
        if not times:
            continue  # no instance went through it (an upload after a failure)
        event, message = PHASE_EVENTS[phase]
        lifecycle.apply(job, event, message, _not_before_history(job, max(times)))


def _shown_this_attempt(job: TrainingJob) -> set[str]:
    """The secondary statuses the job showed since its instances were last launched."""
    shown: set[str] = set()
    for transition in reversed(job.transitions):
        if transition.secondary_status == Secondary.LAUNCHING_INSTANCES:
            break
        shown.add(transition.secondary_status)
    return shown


def _not_before_history(job: TrainingJob, at: datetime) -> datetime:
    """``at``, moved to fit the history: never before its last entry (an instance's clock
    may run behind the server's), never in the future."""
    latest = job.transitions[-1].start_time if job.transitions else at
    return min(max(at, latest), utcnow())
