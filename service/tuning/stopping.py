"""Which running trials to stop before they end: SageMaker's median stopping rule
(``TrainingJobEarlyStoppingType: Auto``) and the Hyperband strategy, decided by Optuna's
pruners over the trials' objective points. Pure functions: the tuner reads the points and
stops the trials.

A trial's step is the ordinal of its objective metric's points on its first host (algo-1):
its n-th value is its value at step n, as SageMaker counts epochs by the objective's values.

The median rule (SageMaker's): a running trial at step n whose best value so far is worse
than the median of the completed trials' running averages of the objective up to step n
is stopped. It is Optuna's ``MedianPruner``, which compares a trial's best value so far
with the median of the completed trials' values *at* step n: fed, for each completed
trial, its running average up to step n as its value at step n, it decides exactly as
SageMaker's rule. "Completed" is as SageMaker's "previously completed training jobs" and
Optuna's COMPLETE: trials whose training job completed, not ones stopped or failed.
SageMaker documents no least number of earlier trials; Runyard's (as Optuna's
``n_startup_trials`` and ``n_min_trials``) is ``MIN_COMPLETED``: with fewer completed
trials, or fewer that reached step n, nothing is stopped.

Hyperband is Optuna's ``HyperbandPruner(min_resource, max_resource)`` (reduction factor 3):
each trial falls in a bracket by its number and the tuning job's seed; in its bracket, a
trial found at or past a rung's step has its latest value compared with the values the
other trials had when they were found there, and is stopped unless it is in their best
third (while fewer than three were found there, only the best goes on). What the pruner
notes of a trial (its value at each rung) is kept in the trial's row and given back each
time the study is rebuilt, so a tuner that restarts decides as the one before. A trial that reaches
MaxResource steps is stopped (SageMaker: "once a job reaches the MaxResource value, it is
stopped"); it keeps its last value as its objective.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from optuna.study import Study

# The least number of completed trials (that reached the step) the median rule needs.
MIN_COMPLETED = 3
# Hyperband's rungs: a trial goes on past one if it is in the best 1/3 of its bracket.
REDUCTION_FACTOR = 3
# The keys of the pruner's own notes on a trial (Optuna's SuccessiveHalvingPruner).
RUNG_NOTE = "completed_rung_"

Direction = Literal["Minimize", "Maximize"]
MEDIAN_REASON = (
    "Stopped early: at step {step}, its best objective value {best:g} was worse than the "
    "median {median:g} of the completed training jobs' running averages (the median "
    "stopping rule, TrainingJobEarlyStoppingType Auto)"
)
HYPERBAND_REASON = (
    "Stopped early by Hyperband: at step {step}, its objective value {value:g} was not "
    "among the best of its bracket"
)
MAX_RESOURCE_REASON = "Stopped by Hyperband: it reached MaxResource ({step} steps)"


@dataclass(frozen=True)
class Stop:
    """A running trial to stop, and why (in words, for its failure reason)."""

    number: int
    reason: str


def median_rule(
    direction: Direction,
    running: Mapping[int, Sequence[float]],
    completed: Mapping[int, Mapping[int, float]],
    *,
    min_completed: int = MIN_COMPLETED,
) -> list[Stop]:
    """The running trials to stop. ``running``: each running trial's values by step (its
    first value is step 1's), by trial number; ``completed``: each completed trial's
    running average of the objective up to each step (at least those the running trials
    are at), by trial number."""
    from optuna.pruners import MedianPruner
    from optuna.trial import TrialState, create_trial

    pruner = MedianPruner(
        n_startup_trials=min_completed, n_warmup_steps=0, n_min_trials=min_completed
    )
    study = _study(direction, "median")
    for number in sorted(completed):
        averages = completed[number]
        last = averages[max(averages)] if averages else 0.0
        study.add_trial(
            create_trial(state=TrialState.COMPLETE, value=last, intermediate_values=dict(averages))
        )
    stops = []
    for number in sorted(running):
        values = running[number]
        if not values:
            continue
        trial = create_trial(
            state=TrialState.RUNNING,
            intermediate_values=dict(enumerate(values, start=1)),
        )
        if pruner.prune(study, trial):
            step = len(values)
            best = min(values) if direction == "Minimize" else max(values)
            median = _median([a[step] for a in completed.values() if step in a])
            stops.append(Stop(number, MEDIAN_REASON.format(step=step, best=best, median=median)))
    return stops


@dataclass(frozen=True)
class Trial:
    """A trial as Hyperband is told of it: its values by step (its first value is step
    1's) and the pruner's notes on it so far."""

    number: int
    running: bool
    values: Sequence[float] = ()
    notes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decided:
    """What Hyperband decided: the trials to stop, and the pruner's new notes on each
    trial it looked at (to keep in its row)."""

    stops: list[Stop]
    notes: dict[int, dict[str, Any]]


def hyperband(
    direction: Direction,
    seed: int,
    min_resource: int,
    max_resource: int,
    trials: Sequence[Trial],
) -> Decided:
    """The running trials to stop, of every trial asked so far (in number order, from 1:
    a trial's bracket depends on its number and on ``seed``)."""
    from optuna.pruners import HyperbandPruner
    from optuna.trial import TrialState, create_trial

    pruner = HyperbandPruner(
        min_resource=min_resource, max_resource=max_resource, reduction_factor=REDUCTION_FACTOR
    )
    study = _study(direction, f"hyperband-{seed}", pruner)
    ordered = sorted(trials, key=lambda t: t.number)
    for trial in ordered:
        study.add_trial(
            create_trial(
                # Only the pruner's notes of the others count: their state does not.
                state=TrialState.RUNNING if trial.running else TrialState.FAIL,
                intermediate_values=dict(enumerate(trial.values, start=1)),
                system_attrs=_rung_notes(trial.notes),
            )
        )
    stops, notes = [], {}
    # Read once, not copied: a trial's own notes change only as it is judged.
    frozen_trials = study.get_trials(deepcopy=False)
    for index, trial in enumerate(ordered):
        if not trial.running or not trial.values:
            continue
        frozen = frozen_trials[index]
        step = len(trial.values)
        if step >= max_resource:
            stops.append(Stop(trial.number, MAX_RESOURCE_REASON.format(step=step)))
            continue
        stop = pruner.prune(study, frozen)
        noted = _rung_notes(study._storage.get_trial(frozen._trial_id).system_attrs)
        if noted != _rung_notes(trial.notes):
            notes[trial.number] = noted
        if stop:
            reason = HYPERBAND_REASON.format(step=step, value=trial.values[-1])
            stops.append(Stop(trial.number, reason))
    return Decided(stops, notes)


def _study(direction: Direction, name: str, pruner: Any = None) -> Study:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=name,
        direction="minimize" if direction == "Minimize" else "maximize",
        pruner=pruner,
    )


def _rung_notes(notes: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in notes.items() if key.startswith(RUNG_NOTE)}


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
