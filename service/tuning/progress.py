"""Where a tuning job stands, read from its trials: their counts by status and by
objective, and the best trial so far.

Each function reads only a trial's number, status and objective, so it takes the trials'
rows as the tuner loads them or the few columns a listing loads of many tuning jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from service.tuning.schemas import ObjectiveCounts, TrainingJobCounts
from service.tuning.trials import LIVE


class TrialState(Protocol):
    @property
    def number(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def objective(self) -> float | None: ...
    @property
    def objective_status(self) -> str: ...


Trial = TypeVar("Trial", bound=TrialState)


def training_job_counts(trials: Sequence[TrialState]) -> TrainingJobCounts:
    counts = TrainingJobCounts()
    for trial in trials:
        if trial.status in LIVE:
            counts.in_progress += 1
        elif trial.status == "Completed":
            counts.completed += 1
        elif trial.status == "Stopped":
            counts.stopped += 1
        else:
            counts.failed += 1
    return counts


def objective_counts(trials: Sequence[TrialState]) -> ObjectiveCounts:
    counts = ObjectiveCounts()
    for trial in trials:
        if trial.objective_status == "Succeeded":
            counts.succeeded += 1
        elif trial.objective_status == "Pending":
            counts.pending += 1
        else:
            counts.failed += 1
    return counts


def best(trials: Sequence[Trial], objective_type: str) -> Trial | None:
    """The trial with the best objective; of equal ones, the first."""
    scored = [t for t in trials if t.objective_status == "Succeeded" and t.objective is not None]
    if not scored:
        return None
    sign = 1.0 if objective_type == "Minimize" else -1.0
    return min(scored, key=lambda t: (sign * (t.objective or 0.0), t.number))
