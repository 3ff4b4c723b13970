"""Why a local instance ended without its runtime's result, from how its process ended.

The instance is a process group whose leader is the runtime; the only signal the machine
gives is the leader's exit status, which ``processes.child_exit_code`` reports as a shell
does (128 + the signal that killed it). A runtime reports its result before it exits,
whatever its script did, so a leader that exited without one was lost; a signal says by
whom.
"""

from __future__ import annotations

import signal

from contract.failure_causes import FailureCause

# The signal that killed the runtime -> cause.
SIGNAL_CAUSES: dict[int, FailureCause] = {
    # Killed outright: by hand, or by the kernel's OOM killer for the whole machine (a
    # script over its memory is killed alone, and its runtime reports it).
    signal.SIGKILL: FailureCause.INSTANCE_LOST,
    # Told to end from outside Runyard before it could report: Runyard's own stops reach a
    # runtime that reports them.
    signal.SIGTERM: FailureCause.INSTANCE_STOPPED,
    signal.SIGINT: FailureCause.INSTANCE_STOPPED,
    signal.SIGHUP: FailureCause.INSTANCE_STOPPED,
}
# Exit statuses above this one are a signal's (128 + its number).
_SIGNALLED = 128


def ended_cause(exit_code: int | None) -> FailureCause:
    """Why an instance whose leader exited with ``exit_code`` (None: unknown, or its
    leader is gone) ended without a result."""
    if exit_code is not None and exit_code > _SIGNALLED:
        return SIGNAL_CAUSES.get(exit_code - _SIGNALLED, FailureCause.INSTANCE_LOST)
    return FailureCause.INSTANCE_LOST
