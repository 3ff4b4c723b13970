"""Each backend's table of its own signals: what ended an instance without its runtime's
result, read as a failure cause (``contract.failure_causes``). Through each backend's
describe, against its local stand-in, the tests of that backend show the same."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from contract.failure_causes import FailureCause
from provisioning.ec2 import failure_causes as ec2
from provisioning.kubernetes import failure_causes as kubernetes
from provisioning.local import failure_causes as local

LOST = FailureCause.INSTANCE_LOST


@pytest.mark.parametrize(
    ("pod_reason", "termination_reason", "cause"),
    [
        # Over its memory limit: the job's doing.
        (None, "OOMKilled", FailureCause.OUT_OF_MEMORY),
        # The runtime exited without its result: lost.
        (None, "Error", LOST),
        (None, "Completed", LOST),
        (None, "ContainerStatusUnknown", LOST),
        # The job's image has nothing to run.
        (None, "StartError", FailureCause.JOB_CONFIGURATION),
        (None, "ContainerCannotRun", FailureCause.JOB_CONFIGURATION),
        # The pod's own reason says more than its container's exit.
        ("Evicted", "Error", LOST),
        ("Evicted", "OOMKilled", LOST),
        ("Terminated", "Error", LOST),
        ("Preempting", None, FailureCause.INSUFFICIENT_CAPACITY),
        ("OutOfnvidia.com/gpu", None, FailureCause.INSUFFICIENT_CAPACITY),
        # A reason no table knows (a newer kubelet's), or none: lost.
        ("SomethingNew", "AlsoNew", LOST),
        (None, None, LOST),
        ("", "", LOST),
    ],
)
def test_kubernetes_reads_its_pods_and_containers_reasons(
    pod_reason: str | None, termination_reason: str | None, cause: FailureCause
) -> None:
    assert kubernetes.ended_cause(pod_reason, termination_reason) is cause


def test_kubernetes_reads_a_container_that_can_never_start_as_the_jobs_configuration() -> None:
    assert set(kubernetes.WAITING_CAUSES.values()) == {FailureCause.JOB_CONFIGURATION}
    assert {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"} <= set(
        kubernetes.WAITING_CAUSES
    )
    # Waiting to pull is waiting, not an end.
    assert not {"ErrImagePull", "ImagePullBackOff", "ContainerCreating"} & set(
        kubernetes.WAITING_CAUSES
    )


@pytest.mark.parametrize(
    ("instance", "cause"),
    [
        (
            {"StateReason": {"Code": "Server.SpotInstanceTermination"}},
            FailureCause.SPOT_INTERRUPTION,
        ),
        (
            {"StateReason": {"Code": "Server.InsufficientInstanceCapacity"}},
            FailureCause.INSUFFICIENT_CAPACITY,
        ),
        ({"StateReason": {"Code": "Client.UserInitiatedShutdown"}}, FailureCause.INSTANCE_STOPPED),
        ({"StateReason": {"Code": "Client.InstanceInitiatedShutdown"}}, LOST),
        ({"StateReason": {"Code": "Server.InternalError"}}, LOST),
        ({"StateReason": {"Code": "Client.VolumeLimitExceeded"}}, FailureCause.PLATFORM_ERROR),
        ({"StateReason": {"Code": "Client.Unheard.Of"}}, LOST),
        ({"StateReason": {}}, LOST),
        ({}, LOST),
    ],
)
def test_ec2_reads_its_state_reason_codes(instance: dict[str, Any], cause: FailureCause) -> None:
    assert ec2.ended_cause(instance) is cause


@pytest.mark.parametrize(
    ("exit_code", "cause"),
    [
        (128 + signal.SIGKILL, LOST),
        (128 + signal.SIGTERM, FailureCause.INSTANCE_STOPPED),
        (128 + signal.SIGHUP, FailureCause.INSTANCE_STOPPED),
        (128 + signal.SIGSEGV, LOST),
        (1, LOST),
        (0, LOST),
        (None, LOST),
    ],
)
def test_local_reads_how_its_runtime_ended(exit_code: int | None, cause: FailureCause) -> None:
    assert local.ended_cause(exit_code) is cause
