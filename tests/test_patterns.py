"""Users' regular expressions run with a time limit: one that backtracks without end
finds nothing instead of holding the API or a worker."""

from __future__ import annotations

import time

import pytest

from service.jobs.schemas import RetryRule
from service.kit import patterns
from worker.retry_policy import Failure, matches

# Exponential on a run of a's that does not end the line.
RUNAWAY = r"(a|aa)+$"
LINE = "a" * 60 + "!"


def test_a_runaway_search_stops_at_the_time_limit() -> None:
    pattern = patterns.compile_pattern(RUNAWAY)
    started = time.monotonic()
    assert patterns.search(pattern, LINE) is None
    assert time.monotonic() - started < 2.0
    found = patterns.search(pattern, "aaaa")
    assert found is not None
    assert found.group(0) == "aaaa"


def test_a_retry_rule_with_a_runaway_pattern_does_not_match() -> None:
    rule = RetryRule(on_failure_reasons=[RUNAWAY], action="retry")
    started = time.monotonic()
    assert not matches(rule, Failure(infrastructure=False, reason=LINE))
    assert time.monotonic() - started < 2.0


def test_patterns_are_checked_with_the_engine_that_runs_them() -> None:
    with pytest.raises(patterns.PatternError):
        patterns.compile_pattern("(unclosed")
