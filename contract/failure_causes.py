"""Why an attempt of a job failed, as a type: what the reconciler's retry policy decides by.

Each side that knows a failure names its cause: the runtime in its final report
(``contract.protocol.StatusReport``), each backend from its own signals (a container's
termination reason, an EC2 state reason, how a process ended) in an instance's status. A
cause says whose the failure was (``fault``: the job's or the infrastructure's, which
decides the budget a restart spends) and whether a new attempt may well end otherwise
(``transient``). The reason people read stays text (``contract.failures``).

A stop (by a person, ``max_run``, ``max_wait``) is no failure: the job's lifecycle has
events of its own for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from contract.failures import INSTANCE_LOST

# What a process killed with SIGKILL exits with, as a shell reports it: the kernel's OOM
# killer's doing, most likely, when it is the script.
OUT_OF_MEMORY_EXIT = 137


class Fault(StrEnum):
    """Whose a failure is."""

    # The job's: its script, or what its spec asks for.
    JOB = "Job"
    # The machines', the provider's or Runyard's: not the job's doing.
    INFRASTRUCTURE = "Infrastructure"


class FailureCause(StrEnum):
    """Why an attempt failed; its value is the name stored and sent."""

    # The job's own code failed (it exited non-zero: AlgorithmError).
    SCRIPT_ERROR = "ScriptError"
    # The job used more memory than its instance has (exit code 137, a pod OOMKilled).
    OUT_OF_MEMORY = "OutOfMemory"
    # What the job asks for cannot be had: an input, its requirements, its image, its
    # output path (ClientError, InstallError, UploadError, an image no one can pull).
    JOB_CONFIGURATION = "JobConfiguration"
    # The instance went (its machine, its network, its runtime) without a result.
    INSTANCE_LOST = "InstanceLost"
    # The instance was stopped from outside Runyard (by hand, from the provider's console).
    INSTANCE_STOPPED = "InstanceStopped"
    # The provider took a spot instance back.
    SPOT_INTERRUPTION = "SpotInterruption"
    # The provider took the instance back, or would not keep it, for want of capacity.
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    # Runyard itself, or the provider as the operator set it up, failed the job
    # (InternalServerError): the same attempt again would fail the same way.
    PLATFORM_ERROR = "PlatformError"

    @property
    def fault(self) -> Fault:
        return _NATURES[self].fault

    @property
    def transient(self) -> bool:
        """Whether a new attempt may well end otherwise with nothing changed: the instance
        failed, not the job nor the way Runyard runs it."""
        return _NATURES[self].transient


@dataclass(frozen=True)
class _Nature:
    fault: Fault
    transient: bool


# Every cause's nature in one table.
_NATURES: dict[FailureCause, _Nature] = {
    FailureCause.SCRIPT_ERROR: _Nature(Fault.JOB, transient=False),
    FailureCause.OUT_OF_MEMORY: _Nature(Fault.JOB, transient=False),
    FailureCause.JOB_CONFIGURATION: _Nature(Fault.JOB, transient=False),
    FailureCause.INSTANCE_LOST: _Nature(Fault.INFRASTRUCTURE, transient=True),
    FailureCause.INSTANCE_STOPPED: _Nature(Fault.INFRASTRUCTURE, transient=True),
    FailureCause.SPOT_INTERRUPTION: _Nature(Fault.INFRASTRUCTURE, transient=True),
    FailureCause.INSUFFICIENT_CAPACITY: _Nature(Fault.INFRASTRUCTURE, transient=True),
    FailureCause.PLATFORM_ERROR: _Nature(Fault.INFRASTRUCTURE, transient=False),
}


def script_exit_cause(exit_code: int) -> FailureCause:
    """The cause of a script that exited with ``exit_code`` (not 0)."""
    return (
        FailureCause.OUT_OF_MEMORY if exit_code == OUT_OF_MEMORY_EXIT else FailureCause.SCRIPT_ERROR
    )


def untyped_cause(reason: str | None, exit_code: int | None) -> FailureCause:
    """The cause of a failure a runtime reported before reports named one (an instance's
    image from an earlier release): its reason's code said an instance was lost, and any
    other failure was taken for the script's."""
    if reason is not None and reason.startswith(f"{INSTANCE_LOST}:"):
        return FailureCause.INSTANCE_LOST
    return script_exit_cause(exit_code) if exit_code is not None else FailureCause.SCRIPT_ERROR
