"""Which failed instance's reason is the job's: the one whose script ended first, whose
peers failed because of it, even where a peer's result reached the service first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contract.phases import Phase
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
