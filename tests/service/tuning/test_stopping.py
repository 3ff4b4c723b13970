"""The stopping decisions over a tuning job's objective points: SageMaker's median rule
(a running trial's best so far against the median of the completed trials' running
averages at its step) and Hyperband (Optuna's pruner, its notes kept by the caller)."""

from __future__ import annotations

from collections.abc import Sequence

from service.tuning.stopping import MIN_COMPLETED, Trial, hyperband, median_rule


def averages(values: Sequence[float]) -> dict[int, float]:
    """A completed trial's running averages by step, from its points."""
    return {step: sum(values[:step]) / step for step in range(1, len(values) + 1)}


# Three completed trials' losses per step: their running averages at step 3 are 0.8, 0.6
# and 0.4 (median 0.6), while their values at step 3 are 0.5, 0.3 and 0.1 (median 0.3).
COMPLETED = {1: [1.0, 0.9, 0.5], 2: [0.8, 0.7, 0.3], 3: [0.6, 0.5, 0.1]}


def completed() -> dict[int, dict[int, float]]:
    return {number: averages(values) for number, values in COMPLETED.items()}


def test_a_trial_worse_than_the_median_of_running_averages_is_stopped_a_better_one_not() -> None:
    running = {4: [0.9, 0.8, 0.7], 5: [0.9, 0.7, 0.5]}
    (stop,) = median_rule("Minimize", running, completed())
    assert stop.number == 4
    assert "at step 3" in stop.reason
    assert "best objective value 0.7" in stop.reason
    assert "median 0.6 " in stop.reason
    # 0.5 beats the median of the running averages (0.6), though not that of the values
    # at step 3 (0.3): the rule is SageMaker's, not Optuna's own.


def test_the_best_value_so_far_counts_not_the_latest() -> None:
    # Its latest value (0.9) is worse than the median, its best (0.55) is not.
    assert median_rule("Minimize", {4: [0.55, 0.9, 0.9]}, completed()) == []


def test_maximize_stops_a_trial_below_the_median() -> None:
    accuracy = {n: averages([1 - v for v in values]) for n, values in COMPLETED.items()}
    # Running averages at step 2: 0.05, 0.25, 0.45 (median 0.25).
    stops = median_rule("Maximize", {4: [0.1, 0.2], 5: [0.2, 0.3]}, accuracy)
    assert [stop.number for stop in stops] == [4]


def test_too_few_completed_trials_never_stop_one() -> None:
    few = dict(list(completed().items())[: MIN_COMPLETED - 1])
    assert median_rule("Minimize", {4: [5.0, 5.0, 5.0]}, few) == []
    # Enough completed trials, but too few of them reached the running trial's step.
    assert median_rule("Minimize", {4: [5.0, 5.0, 5.0, 5.0]}, completed()) == []
    assert median_rule("Minimize", {4: []}, completed()) == []


def test_the_median_rule_decides_the_same_whatever_the_order() -> None:
    running = {5: [0.9, 0.7, 0.5], 4: [0.9, 0.8, 0.7], 6: [2.0]}
    shuffled = dict(reversed(list(completed().items())))
    first = median_rule("Minimize", running, completed())
    assert median_rule("Minimize", dict(reversed(list(running.items()))), shuffled) == first
    assert [stop.number for stop in first] == [4, 6]


def curve(start: float, step: float, length: int) -> list[float]:
    return [start + step * index for index in range(length)]


def test_hyperband_stops_the_losers_of_a_rung_and_notes_the_winners() -> None:
    # Twelve trials at step 3 (a rung of every bracket with min_resource 1: 1, 3, 9),
    # losses 0.1 .. 1.2: the worst of each bracket are stopped.
    trials = [Trial(n, running=True, values=[2.0, 1.5, n / 10]) for n in range(1, 13)]
    decided = hyperband("Minimize", 7, 1, 27, trials)
    stopped = {stop.number for stop in decided.stops}
    assert stopped
    assert 1 not in stopped  # the best of all goes on, whatever its bracket
    assert all("Stopped early by Hyperband" in stop.reason for stop in decided.stops)
    # The pruner's notes of each trial it promoted are given back, to be kept.
    assert decided.notes[1]
    assert all(key.startswith("completed_rung_") for key in decided.notes[1])

    # Given back with the same points, the notes decide the same; a restart asks nothing
    # of the process before.
    again = [Trial(t.number, True, t.values, decided.notes.get(t.number, {})) for t in trials]
    redecided = hyperband("Minimize", 7, 1, 27, again)
    assert {stop.number for stop in redecided.stops} <= stopped


def test_hyperband_decides_the_same_with_the_same_seed() -> None:
    trials = [Trial(n, running=True, values=[1.0, 0.9, (n * 7 % 12) / 10]) for n in range(1, 13)]
    first = hyperband("Minimize", 3, 1, 27, trials)
    assert hyperband("Minimize", 3, 1, 27, trials) == first
    others = [hyperband("Minimize", seed, 1, 27, trials).stops for seed in range(10)]
    # The seed places the trials in brackets: some seed places them otherwise.
    assert any(stops != first.stops for stops in others)


def test_hyperband_stops_a_trial_at_max_resource_and_none_before_min_resource() -> None:
    (stop,) = hyperband("Minimize", 0, 1, 4, [Trial(1, True, [1.0, 0.9, 0.8, 0.7])]).stops
    assert (stop.number, stop.reason) == (
        1,
        "Stopped by Hyperband: it reached MaxResource (4 steps)",
    )
    losers = [Trial(n, True, [float(n)]) for n in range(1, 13)]
    assert hyperband("Minimize", 0, 2, 20, losers).stops == []
