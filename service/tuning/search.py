"""The search: each trial's parameters asked of one of Optuna's samplers (Random, TPE for
Bayesian, Grid; Random for Hyperband, as Hyperband's paper samples, its trials then
stopped by ``service.tuning.stopping``), whose study is rebuilt from the trials the
database holds every time it is asked. Nothing of the search lives in a process, so a
tuner that restarts asks exactly what it would have asked.

A trial's parameters depend on the tuning job's seed, the trial's number and what the
earlier trials found: the Random and Bayesian samplers are seeded per trial (seed and
number), the Grid sampler with the seed alone (it shuffles the grid once, then trial n
takes its n-th point). Scaling types map onto Optuna's distributions: Linear (and Auto,
which Runyard reads as Linear) on the range, Logarithmic on its logarithm, and
ReverseLogarithmic on the logarithm of 1 - x, so that values near 1 are tried as finely as
Logarithmic tries values near 0.

A warm start's parents' trials come first in the study, as completed trials (``prior``):
each with the values it ran with, where every one of them falls in this tuning job's
ranges (a parent's static value standing for a range it did not tune); the others are
left out, since Optuna takes no trial outside its distributions. The warm start's own
trials are seeded as numbered after them, so that with its parent's seed it does not ask
its parent's points again.

With several training job definitions, the space is conditional, as Optuna's
define-by-run trials allow: a trial first picks its definition (a categorical parameter),
then the values of that definition's ranges, each named after its definition so that two
definitions' ranges of one hyperparameter stay apart. TPE models each parameter from the
trials that have it, so each definition's ranges learn from that definition's trials.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from service.tuning.schemas import (
    CategoricalRange,
    ContinuousRange,
    IntegerRange,
    ParameterRanges,
    ParameterValue,
    TuningJobCreate,
)

if TYPE_CHECKING:
    from optuna import Study
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler
    from optuna.trial import Trial

# The parameter that picks a trial's definition, with several. The ranges' parameters are
# named "<definition>:<hyperparameter>", so this name, without a colon, is none of theirs.
DEFINITION = "definition"

TrialState = Literal["running", "complete", "failed"]


@dataclass(frozen=True)
class Earlier:
    """A trial asked before, as the search is told of it."""

    parameters: dict[str, Any]
    state: TrialState
    objective: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # The training job definition it ran, with several.
    definition: str | None = None


@dataclass(frozen=True)
class Asked:
    """A new trial's parameters (as the script gets them) and the sampler's notes on it;
    with several training job definitions, the one it runs."""

    parameters: dict[str, ParameterValue]
    notes: dict[str, Any]
    definition: str | None = None


def ask(
    spec: TuningJobCreate, seed: int, earlier: Sequence[Earlier], prior: Sequence[Earlier] = ()
) -> Asked:
    """The parameters of trial ``len(earlier) + 1``, after ``earlier`` (every trial
    asked so far, in order) and ``prior`` (a warm start's parents' completed trials)."""
    from optuna.trial import TrialState as OptunaState
    from optuna.trial import create_trial

    # Numbered after the prior trials: a warm start with its parent's seed would otherwise
    # ask, trial by trial, what its parent asked (until Bayesian search has enough trials
    # to model, it samples at random by the trial's seed).
    study = _study(spec, seed, number=len(prior) + len(earlier) + 1)
    if spec.training_job_definitions is not None:
        return _ask_among_definitions(spec, study, earlier)
    space = SearchSpace(spec.definitions[0].parameter_ranges)
    for trial in prior:
        fitted = space.fitted(trial.parameters)
        if fitted is not None and trial.objective is not None:
            study.add_trial(
                create_trial(
                    state=OptunaState.COMPLETE,
                    params=fitted,
                    distributions=space.distributions,
                    value=trial.objective,
                )
            )
    for trial in earlier:
        _tell(study, trial, space.internal(trial.parameters), space.distributions)
    asked = study.ask(space.distributions)
    notes = study.trials[-1].system_attrs
    return Asked(parameters=space.external(asked.params), notes=dict(notes))


def _ask_among_definitions(
    spec: TuningJobCreate, study: Study, earlier: Sequence[Earlier]
) -> Asked:
    """A trial of several definitions: its definition first, then that one's values."""
    from optuna.distributions import CategoricalDistribution

    spaces = {d.name: SearchSpace(d.parameter_ranges) for d in spec.definitions}
    pick = CategoricalDistribution(list(spaces))
    for trial in earlier:
        space = spaces[trial.definition]
        params = {DEFINITION: trial.definition, **space.internal(trial.parameters)}
        distributions = {DEFINITION: pick, **space.distributions}
        _tell(
            study,
            trial,
            _own(trial.definition, params),
            _own(trial.definition, distributions),
        )
    asked = study.ask()
    name = asked.suggest_categorical(DEFINITION, pick.choices)
    assert isinstance(name, str)
    space = spaces[name]
    internal = {
        key: _suggest(asked, f"{name}:{key}", distribution)
        for key, distribution in space.distributions.items()
    }
    notes = study.trials[-1].system_attrs
    return Asked(parameters=space.external(internal), notes=dict(notes), definition=name)


def _own(definition: str | None, values: dict[str, Any]) -> dict[str, Any]:
    """A definition's parameters as the study names them (the pick keeps its own name)."""
    return {key if key == DEFINITION else f"{definition}:{key}": v for key, v in values.items()}


def _suggest(trial: Trial, name: str, distribution: BaseDistribution) -> Any:
    """One value of ``distribution``, through Optuna's public suggest calls."""
    from optuna.distributions import FloatDistribution, IntDistribution

    if isinstance(distribution, FloatDistribution):
        return trial.suggest_float(name, distribution.low, distribution.high, log=distribution.log)
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high, log=distribution.log)
    return trial.suggest_categorical(name, distribution.choices)  # type: ignore[attr-defined]


def _study(spec: TuningJobCreate, seed: int, number: int) -> Study:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    direction: Literal["minimize", "maximize"] = (
        "minimize" if spec.objective_type == "Minimize" else "maximize"
    )
    return optuna.create_study(direction=direction, sampler=_sampler(spec, seed, number=number))


def _tell(
    study: Study,
    trial: Earlier,
    params: dict[str, Any],
    distributions: dict[str, BaseDistribution],
) -> None:
    """An earlier trial, as the study takes it."""
    from optuna.trial import TrialState as OptunaState
    from optuna.trial import create_trial

    states = {
        "running": OptunaState.RUNNING,
        "complete": OptunaState.COMPLETE,
        "failed": OptunaState.FAIL,
    }
    study.add_trial(
        create_trial(
            state=states[trial.state],
            params=params,
            distributions=distributions,
            value=trial.objective if trial.state == "complete" else None,
            system_attrs=trial.notes,
        )
    )


def trial_seed(seed: int, number: int) -> int:
    """A seed of trial ``number``'s own, from the tuning job's."""
    digest = hashlib.sha256(f"{seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _sampler(spec: TuningJobCreate, seed: int, number: int) -> BaseSampler:
    from optuna.samplers import GridSampler, RandomSampler, TPESampler

    if spec.strategy == "Grid":
        ranges = spec.definitions[0].parameter_ranges
        grid: dict[str, list[Any]] = {
            item.name: list(range(item.min_value, item.max_value + 1)) for item in ranges.integer
        }
        grid.update({item.name: list(item.values) for item in ranges.categorical})
        return GridSampler(grid, seed=seed)
    if spec.strategy == "Bayesian":
        return TPESampler(seed=trial_seed(seed, number))
    return RandomSampler(seed=trial_seed(seed, number))


class SearchSpace:
    """A training job's ranges as Optuna's distributions, and values both ways."""

    def __init__(self, ranges: ParameterRanges) -> None:
        self._continuous = {item.name: item for item in ranges.continuous}
        self.distributions: dict[str, BaseDistribution] = {
            **{item.name: _continuous(item) for item in ranges.continuous},
            **{item.name: _integer(item) for item in ranges.integer},
            **{item.name: _categorical(item) for item in ranges.categorical},
        }

    def internal(self, parameters: dict[str, Any]) -> dict[str, Any]:
        """A trial's parameters as the distributions hold them."""
        found = {}
        for name, distribution in self.distributions.items():
            value = parameters[name]
            item = self._continuous.get(name)
            if item is not None and item.scaling_type == "ReverseLogarithmic":
                low, high = distribution.low, distribution.high  # type: ignore[attr-defined]
                value = min(max(1.0 - value, low), high)  # within float rounding of it
            found[name] = value
        return found

    def fitted(self, parameters: dict[str, Any]) -> dict[str, Any] | None:
        """Another tuning job's values (its tuned ones, and its static ones as it gave
        them) as the distributions hold them: None where one is missing, of another kind
        or outside its range."""
        found = {}
        for name, distribution in self.distributions.items():
            # A continuous range's own bounds: its distribution's are reversed for
            # ReverseLogarithmic, which ``internal`` takes care of.
            item = self._continuous.get(name)
            bounds = (item.min_value, item.max_value) if item is not None else None
            value = _as_kind(distribution, parameters.get(name), bounds)
            if value is None:
                return None
            found[name] = value
        return self.internal(found)

    def external(self, internal: dict[str, Any]) -> dict[str, ParameterValue]:
        """Values as the distributions hold them, as the script gets them."""
        found: dict[str, ParameterValue] = {}
        for name, value in internal.items():
            item = self._continuous.get(name)
            if item is not None and item.scaling_type == "ReverseLogarithmic":
                value = min(max(1.0 - value, item.min_value), item.max_value)
            found[name] = value
        return found


def _as_kind(distribution: BaseDistribution, value: Any, bounds: tuple[float, float] | None) -> Any:
    """``value`` as ``distribution`` takes it (a number given as text read as one, a
    categorical value matched as given or as its text), or None where it is not one of
    its values."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        choices = distribution.choices
        if value in choices and any(type(c) is type(value) for c in choices):
            return value
        return next((choice for choice in choices if str(choice) == str(value)), None)
    if value is None or isinstance(value, bool):
        return None
    low, high = bounds or (distribution.low, distribution.high)  # type: ignore[attr-defined]
    try:
        number: float = _whole(value) if isinstance(distribution, IntDistribution) else float(value)
    except (TypeError, ValueError):
        return None
    return number if low <= number <= high else None


def _whole(value: Any) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    return int(value)


def _continuous(item: ContinuousRange) -> BaseDistribution:
    from optuna.distributions import FloatDistribution

    if item.scaling_type == "ReverseLogarithmic":
        return FloatDistribution(1.0 - item.max_value, 1.0 - item.min_value, log=True)
    return FloatDistribution(item.min_value, item.max_value, log=item.scaling_type == "Logarithmic")


def _integer(item: IntegerRange) -> BaseDistribution:
    from optuna.distributions import IntDistribution

    return IntDistribution(item.min_value, item.max_value, log=item.scaling_type == "Logarithmic")


def _categorical(item: CategoricalRange) -> BaseDistribution:
    from optuna.distributions import CategoricalDistribution

    return CategoricalDistribution(item.values)
