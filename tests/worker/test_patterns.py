"""Users' regular expressions run by RE2: a pattern that would backtrack without end in a
backtracking engine runs in time linear in its line, and one whose program would be
huge, or that RE2 cannot run, is refused when it is given."""

from __future__ import annotations

import time

import pytest

from contract.failure_causes import FailureCause
from service.jobs.spec_parts import MetricDefinition, RetryRule
from service.kit import patterns
from worker.retry_policy import Failure, matches

# Exponential on a run of a's that does not end the line, in a backtracking engine.
RUNAWAY = r"(a|aa)+$"
LINE = "a" * 100_000 + "!"


def test_a_pattern_that_would_backtrack_runs_in_linear_time() -> None:
    pattern = patterns.compile_pattern(RUNAWAY)
    started = time.monotonic()
    assert patterns.search(pattern, LINE) is None
    assert time.monotonic() - started < 0.5
    found = patterns.search(pattern, "aaaa")
    assert found is not None
    assert found.group(0) == "aaaa"


def test_a_retry_rule_with_a_runaway_pattern_does_not_match() -> None:
    rule = RetryRule(on_failure_reasons=[RUNAWAY], action="retry")
    started = time.monotonic()
    assert not matches(rule, Failure(FailureCause.SCRIPT_ERROR, reason=LINE))
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(unclosed", "missing"),
        # Nested counted repetition: a program of a million states or more.
        ("((((a{100}){100}){100}){100})", "repetition"),
        ("(a{1000}){1000}", "repetition"),
        # What a backtracking engine has and RE2 has not.
        (r"(a)\1", "escape"),
        (r"(?<=a)(b)", "perl operator"),
    ],
)
def test_patterns_re2_cannot_run_cheaply_are_refused_with_its_reason(
    pattern: str, why: str
) -> None:
    with pytest.raises(patterns.PatternError, match=why):
        patterns.compile_pattern(pattern)
    with pytest.raises(ValueError, match="not a valid regular expression"):
        MetricDefinition(name="m", regex=pattern)


@pytest.mark.parametrize(
    ("pattern", "line", "value"),
    [
        # As SageMaker's examples write them.
        (r"Train_Loss=(.*?);", "epoch 1 Train_Loss=0.25; ok", "0.25"),
        (r"loss: ([0-9\.]+)", "step 3 loss: 1.5", "1.5"),
        (r"Test set: Average loss: (\d+\.\d+)", "Test set: Average loss: 0.0312", "0.0312"),
        (r"\bacc\w*=([-+]?[0-9]*\.?[0-9]+)", "accuracy=-0.5", "-0.5"),
    ],
)
def test_sagemaker_style_metric_regexes_run_as_written(pattern: str, line: str, value: str) -> None:
    found = patterns.search(patterns.compile_pattern(pattern), line)
    assert found is not None
    assert found.group(1) == value
