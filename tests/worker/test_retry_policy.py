"""The retry policy on its own: which failures are restarted, in what order rules apply,
and each kind's budget."""

from __future__ import annotations

from typing import Any

import pytest

from contract.limits import MAX_REASON
from service.jobs.record import JobRecord
from worker.retry_policy import Failure, backoff_seconds, decide

OOM = Failure(infrastructure=False, reason="AlgorithmError: out of memory", exit_code=137)
CRASH = Failure(infrastructure=False, reason="AlgorithmError: exit 3", exit_code=3)
LOST = Failure(infrastructure=True, reason="InstanceLost: algo-2 ended")


def _spec(**fields: Any) -> JobRecord:
    return JobRecord(
        name="job-1",
        output_path="file:///out",
        entry_point="train.py",
        source_uri="file:///src",
        instance_type="local",
        **fields,
    )


def _retries(failure: Failure, spec: JobRecord, restarts: int = 0, infra: int = 0) -> bool:
    verdict = decide(
        failure,
        spec,
        restarts=restarts,
        infrastructure_restarts=infra,
        max_infrastructure_restarts=2,
    )
    return verdict.retry


@pytest.mark.parametrize(
    ("rules", "failure", "retried"),
    [
        # Without rules: the infrastructure's failures are retried, the script's are not...
        ([], LOST, True),
        # ...unless retries are allowed, when every failure is retryable.
        ([], CRASH, True),
        ([{"on_exit_codes": [3], "action": "retry"}], CRASH, True),
        ([{"on_exit_codes": [3], "action": "retry"}], OOM, False),
        # Both conditions must hold.
        ([{"on_exit_codes": [137], "on_failure_reasons": ["disk"], "action": "retry"}], OOM, False),
        (
            [{"on_exit_codes": [137], "on_failure_reasons": ["memory$"], "action": "retry"}],
            OOM,
            True,
        ),
        # The first rule that matches decides.
        (
            [
                {"on_failure_reasons": ["out of memory"], "action": "fail"},
                {"action": "retry"},
            ],
            OOM,
            False,
        ),
        ([{"on_failure_reasons": ["^InstanceLost"], "action": "fail"}], LOST, False),
    ],
)
def test_rules(rules: list[dict[str, Any]], failure: Failure, retried: bool) -> None:
    assert _retries(failure, _spec(max_retry_attempts=1, retry_rules=rules)) is retried


def test_without_retries_allowed_a_script_failure_is_final() -> None:
    assert not _retries(CRASH, _spec())
    assert _retries(LOST, _spec())


def test_each_kind_spends_its_own_budget() -> None:
    spec = _spec(max_retry_attempts=1)
    assert not _retries(CRASH, spec, restarts=1, infra=0)
    assert _retries(LOST, spec, restarts=1, infra=1)
    assert not _retries(LOST, spec, restarts=0, infra=2)


def test_back_off_doubles_up_to_its_cap() -> None:
    assert [backoff_seconds(n, 1.0, 5.0) for n in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_a_long_reason_is_cut_to_keep_why_it_was_not_retried() -> None:
    long = Failure(infrastructure=False, reason="AlgorithmError: " + "x" * 2000, exit_code=3)
    verdict = decide(
        long, _spec(), restarts=0, infrastructure_restarts=0, max_infrastructure_restarts=2
    )
    assert not verdict.retry
    assert verdict.reason == long.reason  # never retried: nothing to add
    spent = decide(
        long,
        _spec(max_retry_attempts=1),
        restarts=1,
        infrastructure_restarts=0,
        max_infrastructure_restarts=2,
    )
    assert len(spent.reason) == MAX_REASON
    assert spent.reason.startswith("AlgorithmError: xxx")
    assert spent.reason.endswith("(no retries left: 1 of max_retry_attempts used)")


def test_a_traceback_cut_for_why_it_was_not_retried_keeps_its_exception() -> None:
    frames = [f'  File "/opt/ml/code/train.py", line {n}, in step{n}' for n in range(60)]
    text = "\n".join(["Traceback (most recent call last):", *frames, "ValueError: bad shard 7"])
    failure = Failure(infrastructure=False, reason=text, exit_code=1)
    spent = decide(
        failure,
        _spec(max_retry_attempts=1),
        restarts=1,
        infrastructure_restarts=0,
        max_infrastructure_restarts=2,
    )
    assert len(spent.reason) <= MAX_REASON
    assert spent.reason.startswith("Traceback (most recent call last):")
    assert "ValueError: bad shard 7 (no retries left" in spent.reason
