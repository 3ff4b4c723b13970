"""The search strategies: a seed reproduces a tuning job's trials, each scaling type
samples its range as it says, and Grid tries every point once."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from service.tuning import search
from service.tuning.schemas import TuningJobCreate


def spec(strategy: str = "Random", **ranges: Any) -> TuningJobCreate:
    return TuningJobCreate.model_validate(
        {
            "name": "tune-1",
            "strategy": strategy,
            "objective": {"type": "Minimize", "metric_name": "loss"},
            "resource_limits": {"max_number_of_training_jobs": 30, "max_parallel_training_jobs": 2},
            "parameter_ranges": ranges
            or {
                "continuous": [
                    {
                        "name": "lr",
                        "min_value": 1e-4,
                        "max_value": 1.0,
                        "scaling_type": "Logarithmic",
                    }
                ],
                "integer": [{"name": "layers", "min_value": 1, "max_value": 8}],
                "categorical": [{"name": "optimizer", "values": ["adam", "sgd"]}],
            },
            "training_job": {
                "entry_point": "train.py",
                "source_uri": "file:///src",
                "instance_type": "local",
                "metric_definitions": [{"name": "loss", "regex": "loss=([0-9.]+)"}],
            },
        }
    )


def loss(parameters: dict[str, Any]) -> float:
    """A stand-in for a training job's result."""
    return abs(math.log10(parameters["lr"]) + 2) + parameters["layers"] / 10


def run(tuning: TuningJobCreate, seed: int, trials: int) -> list[dict[str, Any]]:
    """Trials asked one after another, each told its loss before the next is asked."""
    earlier: list[search.Earlier] = []
    for _ in range(trials):
        asked = search.ask(tuning, seed, earlier)
        earlier.append(
            search.Earlier(asked.parameters, "complete", loss(asked.parameters), asked.notes)
        )
    return [trial.parameters for trial in earlier]


@pytest.mark.parametrize("strategy", ["Random", "Bayesian"])
def test_a_seed_asks_the_same_trials_and_another_seed_others(strategy: str) -> None:
    tuning = spec(strategy)
    first = run(tuning, seed=7, trials=12)
    assert run(tuning, seed=7, trials=12) == first
    assert run(tuning, seed=8, trials=12) != first
    # Different trials of one tuning job try different parameters.
    assert len({trial["lr"] for trial in first}) == 12


def test_bayesian_search_goes_where_the_earlier_trials_did_best() -> None:
    # Past Optuna's ten random start-up trials, TPE samples near the best ones: lr near
    # 1e-2 and few layers, where loss() is lowest.
    trials = run(spec("Bayesian"), seed=3, trials=30)
    random = run(spec("Random"), seed=3, trials=30)
    assert statistics.mean(loss(t) for t in trials[15:]) < statistics.mean(
        loss(t) for t in random[15:]
    )


def test_a_trial_asked_while_others_run_is_asked_the_same_after_a_restart() -> None:
    # The search holds nothing between asks: asking again with the same stored trials
    # (as a tuner that restarted does) gives the same parameters.
    tuning = spec("Bayesian")
    earlier = [
        search.Earlier({"lr": 0.01, "layers": 2, "optimizer": "adam"}, "complete", 0.2),
        search.Earlier({"lr": 0.5, "layers": 7, "optimizer": "sgd"}, "failed"),
        search.Earlier({"lr": 0.001, "layers": 4, "optimizer": "adam"}, "running"),
    ]
    assert search.ask(tuning, 11, earlier) == search.ask(tuning, 11, earlier)


def test_grid_tries_every_point_once_in_an_order_the_seed_shuffles() -> None:
    ranges = {
        "integer": [{"name": "layers", "min_value": 1, "max_value": 3}],
        "categorical": [{"name": "optimizer", "values": ["adam", "sgd"]}],
    }
    tuning = spec("Grid", **ranges)
    assert tuning.max_trials == 6
    tried = run_grid(tuning, seed=5)
    points = {(t["layers"], t["optimizer"]) for t in tried}
    assert points == {(layers, opt) for layers in (1, 2, 3) for opt in ("adam", "sgd")}
    assert run_grid(tuning, seed=5) == tried
    assert run_grid(tuning, seed=6) != tried


def run_grid(tuning: TuningJobCreate, seed: int) -> list[dict[str, Any]]:
    earlier: list[search.Earlier] = []
    for _ in range(tuning.max_trials):
        asked = search.ask(tuning, seed, earlier)
        earlier.append(search.Earlier(asked.parameters, "running", notes=asked.notes))
    return [trial.parameters for trial in earlier]


def continuous(scaling: str, low: float, high: float) -> list[float]:
    ranges = {
        "continuous": [{"name": "x", "min_value": low, "max_value": high, "scaling_type": scaling}]
    }
    tuning = spec("Random", **ranges)
    return [search.ask(tuning, seed, []).parameters["x"] for seed in range(300)]  # type: ignore[misc]


def test_linear_scaling_samples_the_range_evenly() -> None:
    values = continuous("Linear", 0.0, 1.0)
    assert all(0.0 <= v <= 1.0 for v in values)
    assert 0.4 < statistics.median(values) < 0.6


def test_logarithmic_scaling_samples_each_decade_alike() -> None:
    values = continuous("Logarithmic", 1e-4, 1.0)
    assert all(1e-4 <= v <= 1.0 for v in values)
    # Half the values below 1e-2, the middle of the range's four decades.
    assert 1e-3 < statistics.median(values) < 1e-1


def test_reverse_logarithmic_scaling_samples_values_near_one_finely() -> None:
    values = continuous("ReverseLogarithmic", 0.0, 0.9999)
    assert all(0.0 <= v <= 0.9999 for v in values)
    # 1 - x is spread evenly over its decades: half the values above 0.99.
    assert 0.9 < statistics.median(values) < 0.999


def test_integer_scaling_gives_integers_within_the_range() -> None:
    ranges = {
        "integer": [{"name": "n", "min_value": 1, "max_value": 1000, "scaling_type": "Logarithmic"}]
    }
    tuning = spec("Random", **ranges)
    values = [search.ask(tuning, seed, []).parameters["n"] for seed in range(200)]
    assert all(isinstance(v, int) and 1 <= v <= 1000 for v in values)
    assert statistics.median(values) < 100  # log-uniform: most values are small


def test_a_warm_starts_parent_trials_lead_the_first_asks_toward_their_best() -> None:
    """Bayesian search told 20 parent trials asks its first trials near their best
    (lr about 0.01, few layers); without them, the same seeds ask across the ranges."""
    chosen = random.Random(1)
    prior = []
    for _ in range(20):
        parameters = {
            "lr": 10 ** chosen.uniform(-4, 0),
            "layers": chosen.randint(1, 8),
            "optimizer": chosen.choice(["adam", "sgd"]),
        }
        prior.append(search.Earlier(parameters, "complete", loss(parameters)))

    def near_best(asks: list[dict[str, Any]]) -> int:
        return sum(1 for p in asks if abs(math.log10(p["lr"]) + 2) < 0.5 and p["layers"] <= 3)

    tuning = spec("Bayesian")
    warm = [search.ask(tuning, seed, [], prior).parameters for seed in range(20)]
    cold = [search.ask(tuning, seed, []).parameters for seed in range(20)]
    assert near_best(warm) >= 15
    assert near_best(cold) <= 5


def test_a_parents_values_count_only_where_they_fit_this_tuning_jobs_ranges() -> None:
    space = search.SearchSpace(
        spec(
            continuous=[
                {"name": "lr", "min_value": 0.001, "max_value": 0.1, "scaling_type": "Logarithmic"},
                {
                    "name": "momentum",
                    "min_value": 0.5,
                    "max_value": 0.99,
                    "scaling_type": "ReverseLogarithmic",
                },
            ],
            integer=[{"name": "layers", "min_value": 1, "max_value": 8}],
            categorical=[{"name": "optimizer", "values": ["adam", "sgd"]}],
        )
        .definitions[0]
        .parameter_ranges
    )
    given = {"lr": 0.01, "momentum": 0.9, "layers": 2, "optimizer": "sgd"}
    assert space.fitted(given) == {**given, "momentum": pytest.approx(0.1)}
    # A static value of a parent, as its request wrote it, reads as the range's kind.
    assert space.fitted({**given, "lr": "0.02", "layers": "3", "optimizer": "adam"}) == {
        **given,
        "lr": 0.02,
        "momentum": pytest.approx(0.1),
        "layers": 3,
        "optimizer": "adam",
    }
    for other in (
        {"lr": 0.5},  # outside the range
        {"momentum": 0.2},  # below a reversed range
        {"layers": 2.5},  # not a whole number
        {"layers": True},
        {"optimizer": "rmsprop"},
        {"lr": "fast"},
    ):
        assert space.fitted({**given, **other}) is None, other
    assert space.fitted({"lr": 0.01, "layers": 2, "optimizer": "sgd"}) is None  # one missing


@pytest.mark.parametrize("strategy", ["Random", "Bayesian"])
def test_a_warm_start_with_its_parents_seed_asks_other_points_than_its_parent(
    strategy: str,
) -> None:
    tuning = spec(strategy)
    parent = run(tuning, seed=7, trials=3)
    prior = [search.Earlier(p, "complete", loss(p)) for p in parent]
    earlier: list[search.Earlier] = []
    for _ in range(3):
        asked = search.ask(tuning, 7, earlier, prior).parameters
        assert asked not in parent
        earlier.append(search.Earlier(asked, "complete", loss(asked)))
