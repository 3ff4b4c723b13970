"""Why a job's EC2 instance ended, from EC2's state reason code (``StateReason.Code``).

A code missing here (or none at all) reads as a lost instance, as every ended instance did
before its code was read.
"""

from __future__ import annotations

from typing import Any

from contract.failure_causes import FailureCause

# EC2's StateReason.Code -> cause.
STATE_REASON_CAUSES: dict[str, FailureCause] = {
    # The provider reclaimed a spot instance, with or without a notice that reached us.
    "Server.SpotInstanceShutdown": FailureCause.SPOT_INTERRUPTION,
    "Server.SpotInstanceTermination": FailureCause.SPOT_INTERRUPTION,
    # EC2 had too little capacity to keep (or start) the instance.
    "Server.InsufficientInstanceCapacity": FailureCause.INSUFFICIENT_CAPACITY,
    # EC2's own failure, or its scheduled retirement of the host.
    "Server.InternalError": FailureCause.INSTANCE_LOST,
    "Server.ScheduledStop": FailureCause.INSTANCE_LOST,
    # The machine shut itself down: its runtime does, once it has reported, so without a
    # report the runtime was lost before it could.
    "Client.InstanceInitiatedShutdown": FailureCause.INSTANCE_LOST,
    # Stopped, hibernated or terminated from outside Runyard (the console, the API), or
    # while someone made an image of it.
    "Client.UserInitiatedShutdown": FailureCause.INSTANCE_STOPPED,
    "Client.UserInitiatedHibernate": FailureCause.INSTANCE_STOPPED,
    "Client.InstanceTerminated": FailureCause.INSTANCE_STOPPED,
    # The account as the operator set it up cannot run it (an EBS key it may not use, a
    # snapshot of the image gone, its volume limit): every attempt would end the same way.
    "Client.InternalError": FailureCause.PLATFORM_ERROR,
    "Client.InvalidSnapshot.NotFound": FailureCause.PLATFORM_ERROR,
    "Client.VolumeLimitExceeded": FailureCause.PLATFORM_ERROR,
}


def ended_cause(instance: dict[str, Any]) -> FailureCause:
    """Why ``instance`` (as DescribeInstances shows it) ended without its runtime's result."""
    code = str(instance.get("StateReason", {}).get("Code") or "")
    return STATE_REASON_CAUSES.get(code, FailureCause.INSTANCE_LOST)
