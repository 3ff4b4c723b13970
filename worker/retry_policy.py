"""Whether a failed attempt of a job is restarted or ends the job: policy as data.

A failure has a cause (``contract.failure_causes``), whose fault is the job's (its script
failed, ran out of memory, asked for what cannot be had) or the infrastructure's (an
instance vanished or was stopped from outside Runyard, Runyard itself failed). The job's
``retry_rules`` are tried in order and the first that matches decides; with none
matching, a transient failure (the instance's, not the job's nor Runyard's) is restarted,
and any other is not, unless the job allows retries and gives no rules at all (then every
failure is retryable). Each fault has its own budget: ``max_retry_attempts`` for the
job's, the server's ``max_infrastructure_restarts`` for the infrastructure's.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.failure_causes import FailureCause, Fault
from contract.failures import fit
from contract.limits import MAX_REASON
from service.jobs.record import JobRecord
from service.jobs.spec_parts import RetryRule
from service.kit import patterns


@dataclass(frozen=True)
class Failure:
    cause: FailureCause
    # What people read (and the job's rules match).
    reason: str
    exit_code: int | None = None

    @property
    def infrastructure(self) -> bool:
        return self.cause.fault == Fault.INFRASTRUCTURE


@dataclass(frozen=True)
class Verdict:
    retry: bool
    # The failure reason; when the job fails, with why it was not retried.
    reason: str


def decide(
    failure: Failure,
    spec: JobRecord,
    *,
    restarts: int,
    infrastructure_restarts: int,
    max_infrastructure_restarts: int,
) -> Verdict:
    rule = next((rule for rule in spec.retry_rules if matches(rule, failure)), None)
    if rule is not None:
        wanted = rule.action == "retry"
    elif failure.cause.transient:
        wanted = True
    else:
        wanted = spec.max_retry_attempts > 0 and not spec.retry_rules
    if not wanted:
        return Verdict(False, failure.reason)
    if failure.infrastructure and infrastructure_restarts >= max_infrastructure_restarts:
        return Verdict(
            False,
            _with_why(
                failure.reason,
                f" (not restarted: the job was already restarted {infrastructure_restarts} "
                "times after infrastructure failures)",
            ),
        )
    if not failure.infrastructure and restarts >= spec.max_retry_attempts:
        return Verdict(
            False,
            _with_why(
                failure.reason,
                f" (no retries left: {spec.max_retry_attempts} of max_retry_attempts used)",
            ),
        )
    return Verdict(True, failure.reason)


def _with_why(reason: str, why: str) -> str:
    """The reason, cut to leave room for why it was not retried within MAX_REASON."""
    return fit(reason, MAX_REASON - len(why)) + why


def matches(rule: RetryRule, failure: Failure) -> bool:
    if rule.on_failure_causes and failure.cause not in rule.on_failure_causes:
        return False
    if rule.on_exit_codes and failure.exit_code not in rule.on_exit_codes:
        return False
    return not rule.on_failure_reasons or any(
        patterns.search(patterns.compile_pattern(pattern), failure.reason)
        for pattern in rule.on_failure_reasons
    )


def backoff_seconds(restarts_so_far: int, base: float, cap: float) -> float:
    """How long the next application retry waits: base, then twice as long each time."""
    return float(min(base * 2**restarts_so_far, cap))
