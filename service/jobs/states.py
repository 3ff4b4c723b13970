"""The job's status vocabulary, as in SageMaker's DescribeTrainingJob."""

from __future__ import annotations

from enum import StrEnum

from contract.phases import Phase


class Status(StrEnum):
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.STOPPED})
# The rest: queries name these (an index finds the few live jobs among many ended ones;
# NOT IN the terminal statuses read every row).
LIVE = frozenset(Status) - TERMINAL


class Stage(StrEnum):
    """Where a job is in its life; each live stage has one reconciler handler."""

    # Waiting for capacity: its instances are not taken from the capacity yet.
    QUEUED = "Queued"
    # Admitted; its instances are not launched yet.
    LAUNCHING = "Launching"
    # Its instances are launched: watch them and their reports.
    RUNNING = "Running"
    # A restart is under way: tear the attempt down, back off, begin the next one.
    RESTARTING = "Restarting"
    # A stop was asked (by a person, or by max_run or max_wait): drive it to Stopped.
    STOPPING = "Stopping"
    ENDED = "Ended"


class Secondary(StrEnum):
    STARTING = "Starting"
    PENDING = "Pending"
    LAUNCHING_INSTANCES = "LaunchingInstances"
    DOWNLOADING = "Downloading"
    TRAINING = "Training"
    UPLOADING = "Uploading"
    RESTARTING = "Restarting"
    INTERRUPTED = "Interrupted"
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
    MAX_WAIT_TIME_EXCEEDED = "MaxWaitTimeExceeded"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    COMPLETED = "Completed"
    FAILED = "Failed"


# How far along each phase is; the job shows the phase of its slowest running instance.
PHASE_ORDER = {
    Phase.DOWNLOADING: 1,
    Phase.TRAINING: 2,
    Phase.UPLOADING: 3,
    Phase.COMPLETED: 4,
    Phase.FAILED: 4,
    Phase.STOPPED: 4,
}

# The last line of the log of a job a user stopped.
STOPPED_BY_USER = "Training job stopped at a user's request (runyard stop, or StopTrainingJob)"
