"""Why a job's pod ended, from Kubernetes' own words: the pod's reason, its runtime
container's termination reason, or the reason its container waits for ever.

Each table maps Kubernetes' reason to a ``FailureCause``; a reason missing here (a newer
kubelet's) reads as a lost instance, as every ended pod did before it was read at all.
"""

from __future__ import annotations

from contract.failure_causes import FailureCause

# The pod's status.reason, when the kubelet ended the pod as a whole: it says more than the
# container's exit (which an eviction or a node's shutdown also ends), so it is read first.
POD_CAUSES: dict[str, FailureCause] = {
    # The node ran short (memory, disk) and took the pod back: the node's doing.
    "Evicted": FailureCause.INSTANCE_LOST,
    # The node shut down (graceful node shutdown says "Terminated"; older kubelets
    # "Shutdown"), or the node controller gave up on an unreachable node.
    "Terminated": FailureCause.INSTANCE_LOST,
    "Shutdown": FailureCause.INSTANCE_LOST,
    "NodeLost": FailureCause.INSTANCE_LOST,
    # A device plugin or the kubelet failed to admit the pod: the node's trouble.
    "UnexpectedAdmissionError": FailureCause.INSTANCE_LOST,
    # The kubelet made room for a critical pod, or found the node short of a resource the
    # scheduler thought it had ("OutOf" and the resource's name).
    "Preempting": FailureCause.INSUFFICIENT_CAPACITY,
    "OutOfcpu": FailureCause.INSUFFICIENT_CAPACITY,
    "OutOfmemory": FailureCause.INSUFFICIENT_CAPACITY,
    "OutOfephemeral-storage": FailureCause.INSUFFICIENT_CAPACITY,
    "OutOfnvidia.com/gpu": FailureCause.INSUFFICIENT_CAPACITY,
    "OutOfpods": FailureCause.INSUFFICIENT_CAPACITY,
}

# The runtime container's state.terminated.reason.
TERMINATION_CAUSES: dict[str, FailureCause] = {
    # Over the memory limit of its instance type: the job's doing, and a restart would only
    # do it again.
    "OOMKilled": FailureCause.OUT_OF_MEMORY,
    # The container could not be started from the job's image (no runtime to run in it).
    "StartError": FailureCause.JOB_CONFIGURATION,
    "ContainerCannotRun": FailureCause.JOB_CONFIGURATION,
    # The runtime ended without reporting a result (it reports before it exits, even a
    # failed script): the instance, not the script, failed.
    "Error": FailureCause.INSTANCE_LOST,
    "Completed": FailureCause.INSTANCE_LOST,
    # The kubelet lost track of the container (its node went, say).
    "ContainerStatusUnknown": FailureCause.INSTANCE_LOST,
}

# The runtime container's state.waiting.reason, of a container that will never start as
# the pod stands, though the pod stays Pending: the instance has ended, as the job asked.
WAITING_CAUSES: dict[str, FailureCause] = {
    # The image reference cannot be parsed.
    "InvalidImageName": FailureCause.JOB_CONFIGURATION,
    # imagePullPolicy Never, and the node lacks the image.
    "ErrImageNeverPull": FailureCause.JOB_CONFIGURATION,
    # A missing Secret or key, an impossible securityContext.
    "CreateContainerConfigError": FailureCause.JOB_CONFIGURATION,
}


def ended_cause(pod_reason: str | None, termination_reason: str | None) -> FailureCause:
    """Why a pod that ended without its runtime's result ended."""
    for reason, table in ((pod_reason, POD_CAUSES), (termination_reason, TERMINATION_CAUSES)):
        if reason and reason in table:
            return table[reason]
    return FailureCause.INSTANCE_LOST
