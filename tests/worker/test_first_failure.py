"""Which failed instance's reason is the job's: the one whose script ended first, whose
peers failed because of it, even where a peer's result reached the service first."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from contract.failure_causes import FailureCause
from contract.phases import Phase
from provisioning.base import InstanceState, InstanceStatus
from worker.reconciler.running import first_failure
from worker.reconciler.snapshot import Report

START = datetime(2026, 1, 1, tzinfo=UTC)


def _failed(host: str, reason: str, script_ended: float, result: float) -> Report:
    return Report(
        host=host,
        phase=Phase.FAILED,
        exit_code=1,
        failure_reason=reason,
        model_uri=None,
        training_started_at=START,
        training_ended_at=START + timedelta(seconds=result),
        script_ended_at=START + timedelta(seconds=script_ended),
        training_reported_at=START,
        uploading_reported_at=None,
        reported_at=START + timedelta(seconds=result),
    )


def test_the_instance_whose_script_ended_first_gives_the_reason() -> None:
    # algo-2's worker died first; it then ended its parameter server before it reported,
    # while algo-1's chief, which failed because of it, reported at once.
    reports = {
        "algo-1": _failed("algo-1", "AlgorithmError: RecvTensor cancelled", 10.5, 10.6),
        "algo-2": _failed("algo-2", "AlgorithmError: the worker lost its footing", 10.0, 14.0),
    }
    failure = first_failure(["algo-1", "algo-2"], None, reports)
    assert failure is not None
    assert "lost its footing" in failure.reason


def _report(phase: Phase, reason: str | None, cause: FailureCause | None) -> Report:
    return replace(
        _failed("algo-1", reason or "", 1.0, 1.0),
        phase=phase,
        failure_reason=reason,
        failure_cause=cause,
    )


@pytest.mark.parametrize(
    ("phase", "reason", "cause", "expected"),
    [
        # The instance said it was lost (its peers gone): the infrastructure's failure.
        (Phase.FAILED, "InstanceLost: algo-1 lost its peers", FailureCause.INSTANCE_LOST, None),
        # Its reason's words are never read for a cause: only what the runtime named.
        (Phase.FAILED, "InstanceLost: the script said so", FailureCause.SCRIPT_ERROR, None),
        (Phase.FAILED, "AlgorithmError: boom", FailureCause.PLATFORM_ERROR, None),
        # A report that named no cause is the script's.
        (Phase.FAILED, "InstanceLost: from long ago", None, FailureCause.SCRIPT_ERROR),
        # Stopped with no stop of Runyard's: from outside.
        (Phase.STOPPED, None, None, FailureCause.INSTANCE_STOPPED),
    ],
)
def test_a_reported_failure_has_the_cause_its_runtime_named(
    phase: Phase,
    reason: str | None,
    cause: FailureCause | None,
    expected: FailureCause | None,
) -> None:
    failure = first_failure(["algo-1"], None, {"algo-1": _report(phase, reason, cause)})
    assert failure is not None
    assert failure.cause is (expected or cause)
    if reason is not None:
        assert failure.reason == reason


@pytest.mark.parametrize(
    ("status", "cause"),
    [
        # The backend read its signals: a pod over its memory limit.
        (
            InstanceStatus(
                "algo-1",
                InstanceState.EXITED,
                exit_code=137,
                reason="OOMKilled",
                cause=FailureCause.OUT_OF_MEMORY,
            ),
            FailureCause.OUT_OF_MEMORY,
        ),
        (
            InstanceStatus("algo-1", InstanceState.EXITED, cause=FailureCause.SPOT_INTERRUPTION),
            FailureCause.SPOT_INTERRUPTION,
        ),
        # It could tell nothing: lost, whatever its reason's words.
        (
            InstanceStatus("algo-1", InstanceState.EXITED, exit_code=137, reason="OOMKilled"),
            FailureCause.INSTANCE_LOST,
        ),
        # Gone from the backend's view altogether.
        (None, FailureCause.INSTANCE_LOST),
    ],
)
def test_an_instance_gone_without_a_result_has_the_cause_its_backend_read(
    status: InstanceStatus | None, cause: FailureCause
) -> None:
    statuses = {"algo-1": status} if status is not None else {}
    failure = first_failure(["algo-1"], statuses, {})
    assert failure is not None
    assert failure.cause is cause
    # What people read is as it always was.
    assert failure.reason.startswith("InstanceLost: algo-1 ended without reporting a result")
    if status is not None and status.reason:
        assert failure.reason.endswith("(exit code 137) (OOMKilled)")
