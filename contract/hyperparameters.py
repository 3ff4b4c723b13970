"""Hyperparameters: encoded into hyperparameters.json as the SageMaker SDK sends them,
decoded from it on the instance, and turned into script arguments."""

from __future__ import annotations

import contextlib
import json
from typing import Any

FRAMEWORK_PREFIX = "sagemaker_"
# What SageMaker adds to each training job of a tuning job: the objective's metric name.
# The platform's, not the script's: SageMaker's training toolkit keeps it out of the
# script's arguments, as it does the sagemaker_* parameters.
TUNING_OBJECTIVE = "_tuning_objective_metric"


def encode(value: Any) -> str:
    """A hyperparameter as it is stored in hyperparameters.json (JSON, like the SageMaker
    SDK). NaN and infinity are refused with ValueError: no script could read them."""
    return json.dumps(value, allow_nan=False)


def decode(raw: dict[str, Any]) -> dict[str, Any]:
    """Values are JSON-encoded strings (as the SageMaker SDK sends them) or plain strings."""
    decoded = {}
    for key, value in raw.items():
        if isinstance(value, str):
            with contextlib.suppress(json.JSONDecodeError):
                value = json.loads(value)
        decoded[key] = value
    return decoded


def split_framework(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(user hyperparameters, framework parameters): ``sagemaker_*`` keys and the tuning
    objective are the latter."""
    user = {k: v for k, v in values.items() if not _is_framework(k)}
    framework = {k: v for k, v in values.items() if _is_framework(k)}
    return user, framework


def _is_framework(key: str) -> bool:
    return key.startswith(FRAMEWORK_PREFIX) or key == TUNING_OBJECTIVE


def to_cli_args(values: dict[str, Any]) -> list[str]:
    """Sorted ``--key value`` pairs (``-k value`` for one-letter keys), as an argv list."""
    args = []
    for key in sorted(values):
        args.append(f"-{key}" if len(key) == 1 else f"--{key}")
        args.append(format_value(values[key]))
    return args


def format_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)  # True/False, as SageMaker's containers pass them
    if isinstance(value, dict):
        return ",".join(f"{k}={format_value(v)}" for k, v in sorted(value.items()))
    return json.dumps(value)
