"""The retry policy on its own: which failures are restarted, in what order rules apply,
and each kind's budget."""

from __future__ import annotations

from typing import Any

import pytest

from contract.failure_causes import FailureCause
from contract.limits import MAX_REASON
from service.jobs.record import JobRecord
from worker.retry_policy import Failure, backoff_seconds, decide

OOM = Failure(FailureCause.OUT_OF_MEMORY, reason="AlgorithmError: out of memory", exit_code=137)
CRASH = Failure(FailureCause.SCRIPT_ERROR, reason="AlgorithmError: exit 3", exit_code=3)
LOST = Failure(FailureCause.INSTANCE_LOST, reason="InstanceLost: algo-2 ended")


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
        # By cause, whatever the reason's words.
        ([{"on_failure_causes": ["InstanceLost"], "action": "fail"}], LOST, False),
        ([{"on_failure_causes": ["OutOfMemory"], "action": "fail"}], OOM, False),
        (
            [{"on_failure_causes": ["OutOfMemory"], "action": "fail"}, {"action": "retry"}],
            CRASH,
            True,
        ),
        (
            [{"on_failure_causes": ["ScriptError"], "on_exit_codes": [4], "action": "retry"}],
            CRASH,
            False,
        ),
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
    long = Failure(FailureCause.SCRIPT_ERROR, reason="AlgorithmError: " + "x" * 2000, exit_code=3)
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
    failure = Failure(FailureCause.SCRIPT_ERROR, reason=text, exit_code=1)
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


# Restarted with no rule to say otherwise: the instance's failures, never the job's nor
# Runyard's own (which a new attempt would only repeat).
RESTARTED_WITHOUT_RULES = {
    FailureCause.INSTANCE_LOST,
    FailureCause.INSTANCE_STOPPED,
    FailureCause.SPOT_INTERRUPTION,
    FailureCause.INSUFFICIENT_CAPACITY,
}


@pytest.mark.parametrize("cause", list(FailureCause))
def test_without_rules_or_retries_a_failure_is_restarted_by_its_cause(cause: FailureCause) -> None:
    # The reason's words decide nothing: every failure here reads as a lost instance.
    failure = Failure(cause, reason="InstanceLost: algo-1 ended", exit_code=1)
    assert _retries(failure, _spec()) is (cause in RESTARTED_WITHOUT_RULES)


def test_a_pod_killed_for_its_memory_is_the_jobs_failure_whatever_its_reason_says() -> None:
    oom_killed = Failure(
        FailureCause.OUT_OF_MEMORY,
        reason="InstanceLost: algo-2 ended without reporting a result (exit code 137) (OOMKilled)",
        exit_code=137,
    )
    assert not _retries(oom_killed, _spec())
    # Retried only as the job allows, within its own budget.
    assert _retries(oom_killed, _spec(max_retry_attempts=1), restarts=0, infra=2)
    assert not _retries(oom_killed, _spec(max_retry_attempts=1), restarts=1, infra=0)


def test_runyards_own_failure_spends_the_infrastructure_budget_not_the_jobs() -> None:
    platform = Failure(FailureCause.PLATFORM_ERROR, reason="InternalServerError: no namespaces")
    spec = _spec(max_retry_attempts=1)  # retries allowed, no rules: every failure retryable
    assert _retries(platform, spec, restarts=1, infra=0)
    verdict = decide(
        platform, spec, restarts=0, infrastructure_restarts=2, max_infrastructure_restarts=2
    )
    assert not verdict.retry
    assert verdict.reason == (
        "InternalServerError: no namespaces (not restarted: the job was already restarted 2 "
        "times after infrastructure failures)"
    )


def test_a_failure_is_the_infrastructures_as_its_cause_says() -> None:
    assert LOST.infrastructure
    assert not OOM.infrastructure
    assert Failure(FailureCause.PLATFORM_ERROR, reason="x").infrastructure
