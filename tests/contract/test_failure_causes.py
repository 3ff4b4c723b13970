"""Each failure cause says whose fault it is and whether a new attempt may end otherwise;
a report from a runtime that names no cause reads as the reconciler read it before."""

from __future__ import annotations

import pytest

from contract.failure_causes import (
    FailureCause,
    Fault,
    script_exit_cause,
    untyped_cause,
)

JOB, INFRASTRUCTURE = Fault.JOB, Fault.INFRASTRUCTURE

# cause -> (fault, transient): every cause, so one added without its nature fails here.
NATURES = {
    FailureCause.SCRIPT_ERROR: (JOB, False),
    FailureCause.OUT_OF_MEMORY: (JOB, False),
    FailureCause.JOB_CONFIGURATION: (JOB, False),
    FailureCause.INSTANCE_LOST: (INFRASTRUCTURE, True),
    FailureCause.INSTANCE_STOPPED: (INFRASTRUCTURE, True),
    FailureCause.SPOT_INTERRUPTION: (INFRASTRUCTURE, True),
    FailureCause.INSUFFICIENT_CAPACITY: (INFRASTRUCTURE, True),
    FailureCause.PLATFORM_ERROR: (INFRASTRUCTURE, False),
}


def test_every_cause_has_a_nature() -> None:
    assert set(NATURES) == set(FailureCause)


@pytest.mark.parametrize(("cause", "nature"), NATURES.items())
def test_a_cause_says_whose_fault_it_is(cause: FailureCause, nature: tuple[Fault, bool]) -> None:
    assert (cause.fault, cause.transient) == nature


def test_only_the_infrastructure_fails_transiently() -> None:
    assert all(cause.fault == INFRASTRUCTURE for cause in FailureCause if cause.transient)


def test_a_cause_travels_as_its_name() -> None:
    assert FailureCause("InstanceLost") is FailureCause.INSTANCE_LOST
    assert FailureCause.OUT_OF_MEMORY.value == "OutOfMemory"


@pytest.mark.parametrize(
    ("exit_code", "cause"),
    [
        (137, FailureCause.OUT_OF_MEMORY),
        (1, FailureCause.SCRIPT_ERROR),
        (143, FailureCause.SCRIPT_ERROR),
    ],
)
def test_a_script_killed_with_sigkill_ran_out_of_memory(
    exit_code: int, cause: FailureCause
) -> None:
    assert script_exit_cause(exit_code) is cause


@pytest.mark.parametrize(
    ("reason", "exit_code", "cause"),
    [
        ("InstanceLost: algo-2 lost its peers", 1, FailureCause.INSTANCE_LOST),
        ("AlgorithmError: ValueError: bad shard, exit code: 1", 1, FailureCause.SCRIPT_ERROR),
        ("OutOfMemory: the script was killed with SIGKILL", 137, FailureCause.OUT_OF_MEMORY),
        # Only the code that begins a reason counted: the same words further on do not.
        ("AlgorithmError: InstanceLost: no", 3, FailureCause.SCRIPT_ERROR),
        (None, None, FailureCause.SCRIPT_ERROR),
    ],
)
def test_an_untyped_report_reads_as_its_reason_said(
    reason: str | None, exit_code: int | None, cause: FailureCause
) -> None:
    assert untyped_cause(reason, exit_code) is cause
