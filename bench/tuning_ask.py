"""The CPU of one ask of a tuning job's search (``service.tuning.search.ask``), after a
number of earlier trials: what each trial's ask costs the tuner, which rebuilds the
search from the stored trials every time. For one training job and for two training job
definitions, with the Random and Bayesian strategies.

    .venv/bin/python bench/tuning_ask.py [--earlier 50] [--asks 20]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _machine import describe

from service.tuning import search
from service.tuning.schemas import TuningJobCreate

_TRAINING_JOB = {
    "entry_point": "train.py",
    "source_uri": "file:///tmp/code",
    "instance_type": "local",
    "metric_definitions": [{"name": "loss", "regex": "loss=([0-9.]+)"}],
}
_RANGES = {
    "continuous": [
        {"name": "lr", "min_value": 0.0001, "max_value": 0.1, "scaling_type": "Logarithmic"}
    ],
    "integer": [{"name": "layers", "min_value": 1, "max_value": 8}],
    "categorical": [{"name": "optimizer", "values": ["adam", "sgd"]}],
}
_OBJECTIVE = {"type": "Minimize", "metric_name": "loss"}


def spec(strategy: str, definitions: int) -> TuningJobCreate:
    fields: dict[str, Any] = {
        "name": "bench",
        "strategy": strategy,
        "resource_limits": {"max_number_of_training_jobs": 500, "max_parallel_training_jobs": 1},
    }
    if definitions == 1:
        fields.update(objective=_OBJECTIVE, parameter_ranges=_RANGES, training_job=_TRAINING_JOB)
    else:
        fields["training_job_definitions"] = [
            {
                "definition_name": f"d{index}",
                "objective": _OBJECTIVE,
                "parameter_ranges": _RANGES,
                "training_job": _TRAINING_JOB,
            }
            for index in range(definitions)
        ]
    return TuningJobCreate.model_validate(fields)


def cpu_per_ask(tuning: TuningJobCreate, earlier_count: int, asks: int) -> float:
    """Milliseconds of this process's CPU per ask after ``earlier_count`` completed trials."""
    earlier: list[search.Earlier] = []
    for number in range(earlier_count):
        asked = search.ask(tuning, 1, earlier)
        earlier.append(
            search.Earlier(
                asked.parameters,
                "complete",
                float(number % 7),
                asked.notes,
                definition=asked.definition,
            )
        )
    started = time.process_time()
    for _ in range(asks):
        search.ask(tuning, 1, earlier)
    return (time.process_time() - started) / asks * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--earlier", type=int, default=50, help="Trials before the asks timed.")
    parser.add_argument("--asks", type=int, default=20, help="Asks timed, each alike.")
    arguments = parser.parse_args()
    print(describe())
    for strategy in ("Random", "Bayesian"):
        for definitions in (1, 2):
            ms = cpu_per_ask(spec(strategy, definitions), arguments.earlier, arguments.asks)
            print(
                f"{strategy:8} {definitions} definition(s): {ms:.1f} ms of CPU per ask after "
                f"{arguments.earlier} trials"
            )
    print(
        f"reproduce: .venv/bin/python bench/tuning_ask.py --earlier {arguments.earlier} "
        f"--asks {arguments.asks}"
    )


if __name__ == "__main__":
    main()
