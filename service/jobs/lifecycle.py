"""A job's life as a table: where it is (its stored ``stage``), what may happen to it
there (an ``Event``, whose name is the machine reason), and where that takes it, with the
status and secondary status it then shows.

``apply`` is the one function that moves a job: the API's submit and stop, and the
reconciler's stages, decide events; none of them writes a status. A pair the table does
not hold is a bug, refused with ``IllegalTransition`` before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from service.jobs import endings
from service.jobs.models import JobTransition, TrainingJob
from service.jobs.states import TERMINAL, Secondary, Stage, Status
from service.kit.db import utcnow
from service.kit.text import without_nul

# How much of a reason the job keeps for what it waits for.
MAX_PENDING_REASON = 2048


class Event(StrEnum):
    """What happens to a job; its value is the machine reason of what follows."""

    SUBMITTED = "Submitted"
    # It waits, saying why (capacity, instances to start): a changed reason updates the
    # current transition rather than adding one.
    WAITING = "Waiting"
    ADMITTED = "Admitted"
    LAUNCHING = "LaunchingInstances"
    LAUNCHED = "Launched"
    # The phase of its slowest instance.
    DOWNLOADING = "Downloading"
    TRAINING = "Training"
    UPLOADING = "Uploading"
    # A stop's reasons, kept as the job's while it stops (``stop_reason``).
    STOP_REQUESTED = "StoppedByUser"
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
    MAX_WAIT_EXCEEDED = "MaxWaitTimeExceeded"
    # A spot notice: the scripts were told to save a checkpoint.
    INTERRUPTED = "Interrupted"
    RESTARTED = "Restarted"
    RESTARTED_ON_INTERRUPTION = "RestartedOnInterruption"
    # A spot launch found no capacity: the job waits for it, then launches again.
    RESTARTED_FOR_CAPACITY = "RestartedForCapacity"
    # The next attempt: its instances went back to the capacity, or it kept them.
    REQUEUED = "Requeued"
    RELAUNCHING = "Relaunching"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPED = "Stopped"
    STOPPED_AT_MAX_RUNTIME = "StoppedAtMaxRuntime"
    STOPPED_AT_MAX_WAIT = "StoppedAtMaxWaitTime"


@dataclass(frozen=True)
class Outcome:
    """Where an event takes a job; a status left None stays as it is."""

    stage: Stage
    status: Status | None = None
    secondary: Secondary | None = None


_LIVE = (Stage.QUEUED, Stage.LAUNCHING, Stage.RUNNING, Stage.RESTARTING, Stage.STOPPING)
_BEFORE_STOPPING = (Stage.QUEUED, Stage.LAUNCHING, Stage.RUNNING, Stage.RESTARTING)
_Table = dict[tuple[Stage, Event], Outcome]


def _from(stages: tuple[Stage, ...], event: Event, outcome: Outcome) -> _Table:
    return {(stage, event): outcome for stage in stages}


def _stays(stage: Stage, event: Event, secondary: Secondary) -> _Table:
    return {(stage, event): Outcome(stage, Status.IN_PROGRESS, secondary)}


def _to(stage: Stage, event: Event, then: Stage, status: Status, secondary: Secondary) -> _Table:
    return {(stage, event): Outcome(then, status, secondary)}


# (stage, event) -> outcome: every move a job can make.
TRANSITIONS: _Table = {
    # A new job is given its first stage by ``submitted``.
    **_stays(Stage.QUEUED, Event.SUBMITTED, Secondary.STARTING),
    **_stays(Stage.QUEUED, Event.WAITING, Secondary.PENDING),
    **_stays(Stage.RUNNING, Event.WAITING, Secondary.PENDING),
    (Stage.QUEUED, Event.ADMITTED): Outcome(Stage.LAUNCHING),
    **_stays(Stage.LAUNCHING, Event.LAUNCHING, Secondary.LAUNCHING_INSTANCES),
    (Stage.LAUNCHING, Event.LAUNCHED): Outcome(Stage.RUNNING),
    **_stays(Stage.RUNNING, Event.DOWNLOADING, Secondary.DOWNLOADING),
    **_stays(Stage.RUNNING, Event.TRAINING, Secondary.TRAINING),
    **_stays(Stage.RUNNING, Event.UPLOADING, Secondary.UPLOADING),
    **_stays(Stage.RUNNING, Event.INTERRUPTED, Secondary.INTERRUPTED),
    **_to(
        Stage.RUNNING, Event.RESTARTED, Stage.RESTARTING, Status.IN_PROGRESS, Secondary.RESTARTING
    ),
    **_to(
        Stage.RUNNING,
        Event.RESTARTED_ON_INTERRUPTION,
        Stage.RESTARTING,
        Status.IN_PROGRESS,
        Secondary.INTERRUPTED,
    ),
    **_from(
        (Stage.LAUNCHING, Stage.RUNNING),
        Event.RESTARTED_FOR_CAPACITY,
        Outcome(Stage.RESTARTING, Status.IN_PROGRESS, Secondary.PENDING),
    ),
    (Stage.RESTARTING, Event.REQUEUED): Outcome(Stage.QUEUED),
    (Stage.RESTARTING, Event.RELAUNCHING): Outcome(Stage.LAUNCHING),
    **_from(
        _BEFORE_STOPPING,
        Event.STOP_REQUESTED,
        Outcome(Stage.STOPPING, Status.STOPPING, Secondary.STOPPING),
    ),
    **_from(
        _BEFORE_STOPPING,
        Event.MAX_WAIT_EXCEEDED,
        Outcome(Stage.STOPPING, Status.STOPPING, Secondary.MAX_WAIT_TIME_EXCEEDED),
    ),
    **_to(
        Stage.RUNNING,
        Event.MAX_RUNTIME_EXCEEDED,
        Stage.STOPPING,
        Status.STOPPING,
        Secondary.MAX_RUNTIME_EXCEEDED,
    ),
    **_to(Stage.RUNNING, Event.COMPLETED, Stage.ENDED, Status.COMPLETED, Secondary.COMPLETED),
    **_from(_LIVE, Event.FAILED, Outcome(Stage.ENDED, Status.FAILED, Secondary.FAILED)),
    **_to(Stage.STOPPING, Event.STOPPED, Stage.ENDED, Status.STOPPED, Secondary.STOPPED),
    **_to(
        Stage.STOPPING,
        Event.STOPPED_AT_MAX_RUNTIME,
        Stage.ENDED,
        Status.STOPPED,
        Secondary.MAX_RUNTIME_EXCEEDED,
    ),
    **_to(
        Stage.STOPPING,
        Event.STOPPED_AT_MAX_WAIT,
        Stage.ENDED,
        Status.STOPPED,
        Secondary.MAX_WAIT_TIME_EXCEEDED,
    ),
}

# The event that begins a stop is its reason, kept while the job stops; this one ends it.
ENDS_STOP = {
    Event.STOP_REQUESTED: Event.STOPPED,
    Event.MAX_RUNTIME_EXCEEDED: Event.STOPPED_AT_MAX_RUNTIME,
    Event.MAX_WAIT_EXCEEDED: Event.STOPPED_AT_MAX_WAIT,
}
# Events that make the job wait, saying why (the message).
_WAITS = frozenset({Event.WAITING, Event.RESTARTED_FOR_CAPACITY})


class IllegalTransition(RuntimeError):
    """The table has no such move: the code that asked for it is wrong."""


def submitted(job: TrainingJob, message: str) -> None:
    """Give a new job its first stage and status."""
    job.stage = Stage.QUEUED
    apply(job, Event.SUBMITTED, message)


def apply(job: TrainingJob, event: Event, message: str = "", now: datetime | None = None) -> Stage:
    """Move ``job`` by ``event``, recording the status it then shows, if the event changes
    it, with ``message`` (what people read); returns the stage it is in. Waiting events
    keep the message as what the job waits for; any other clears it."""
    try:
        outcome = TRANSITIONS[(Stage(job.stage), event)]
    except KeyError:
        raise IllegalTransition(f"{job.name}: no {event} while {job.stage}") from None
    job.stage = outcome.stage
    if event in ENDS_STOP:
        job.stop_reason = event
    if event in _WAITS:
        _wait(job, message)
        return outcome.stage
    job.pending_reason = None
    if outcome.status is not None and outcome.secondary is not None:
        _transition(job, outcome.status, outcome.secondary, message, now)
    return outcome.stage


def end_of_stop(stop_reason: str | None) -> Event:
    """The event that ends a job stopping for ``stop_reason`` (the event that began it)."""
    known = {str(begun): ended for begun, ended in ENDS_STOP.items()}
    return known.get(stop_reason or "", Event.STOPPED)


def _transition(
    job: TrainingJob, status: Status, secondary: str, message: str, now: datetime | None
) -> bool:
    """Record (status, secondary) as the job's; False when that is what it shows already."""
    if job.status == status and job.secondary_status == secondary:
        return False
    now = now or utcnow()
    if job.transitions and job.transitions[-1].end_time is None:
        job.transitions[-1].end_time = now
    job.status = status
    job.secondary_status = secondary
    job.transitions.append(
        JobTransition(
            status=status,
            secondary_status=secondary,
            start_time=now,
            # Messages quote providers and instances, whose words may hold a NUL.
            message=without_nul(message),
        )
    )
    if status in TERMINAL:
        endings.announce(job)
    return True


def _wait(job: TrainingJob, message: str) -> None:
    """The job waits, saying why; a changed reason updates the current transition rather
    than adding one."""
    message = without_nul(message)
    job.pending_reason = message[:MAX_PENDING_REASON]
    if (
        not _transition(job, Status.IN_PROGRESS, Secondary.PENDING, message, None)
        and job.transitions[-1].message != message
    ):
        job.transitions[-1].message = message[:MAX_PENDING_REASON]


def markdown() -> str:
    """The table as the docs print it: every move, grouped by the stage it starts from."""
    lines = [
        "# A job's lifecycle",
        "",
        "Generated from `service/jobs/lifecycle.py` by `python -m service.jobs.lifecycle`;",
        "a test fails when this page and the table differ. A job moves only by these events",
        "(the event is the machine reason); a status left blank does not change.",
        "A running job's Downloading, Training and Uploading are recorded for each phase",
        "one of its instances went through, however briefly, at the time the instances",
        "reached it, even where the worker sees the reports late",
        "(`worker/reconciler/phases.py`); its result is recorded before its instances are",
        "removed (`worker/reconciler/ending.py`).",
        "",
        "| stage | event | next stage | status | secondary status |",
        "|---|---|---|---|---|",
    ]
    order = {stage: index for index, stage in enumerate(Stage)}
    events = {event: index for index, event in enumerate(Event)}
    for (stage, event), outcome in sorted(
        TRANSITIONS.items(), key=lambda item: (order[item[0][0]], events[item[0][1]])
    ):
        lines.append(
            f"| {stage} | {event} | {outcome.stage} | {outcome.status or ''} "
            f"| {outcome.secondary or ''} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
