"""The distribution a job names in its hyperparameters, as the SageMaker SDK writes it.

The SDK turns an estimator's ``distribution`` dict into hyperparameters
(``sagemaker_mpi_enabled``, ``sagemaker_mpi_num_of_processes_per_host``, ...), and
SageMaker's containers choose their launcher from those alone; boto3 users and the
training toolkits' own tests pass them directly. Runyard reads them back into the
``distribution`` dict its modes (``contract.modes``) are enabled by, on every way in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.problems import Problem

# A flag's value as the SDK writes it (JSON ``true``) or a person might (a Python bool).
_TRUE = (True, "true", "True", "TRUE")

# Each mode's flag, in the order its key appears in ``distribution``.
_TOGGLES = (
    ("sagemaker_torch_distributed_enabled", ("torch_distributed",)),
    ("sagemaker_pytorch_ddp_enabled", ("pytorchddp",)),
    ("sagemaker_parameter_server_enabled", ("parameter_server",)),
    ("sagemaker_multi_worker_mirrored_strategy_enabled", ("multi_worker_mirrored_strategy",)),
    ("sagemaker_distributed_dataparallel_enabled", ("smdistributed", "dataparallel")),
    ("sagemaker_mpi_enabled", ("mpi",)),
)
# Options beside a flag: (hyperparameter, the flag it belongs to, the option's key).
_OPTIONS = (
    ("sagemaker_mpi_num_of_processes_per_host", "sagemaker_mpi_enabled", "processes_per_host"),
    ("sagemaker_mpi_custom_mpi_options", "sagemaker_mpi_enabled", "custom_mpi_options"),
    (
        "sagemaker_distributed_dataparallel_custom_mpi_options",
        "sagemaker_distributed_dataparallel_enabled",
        "custom_mpi_options",
    ),
)
# Model parallelism runs under mpirun: the SDK sends its parameters beside the mpi flag.
MODEL_PARALLEL_PARAMETERS = "mp_parameters"
# What SageMaker's containers run and Runyard does not: refused, naming the flag.
_REFUSED = {
    "sagemaker_distribution_instance_groups": "heterogeneous instance groups are not supported",
    "sagemaker_pytorch_xla_multi_worker_enabled": "PyTorch/XLA is not supported",
}


def flag_of(path: tuple[str, ...]) -> str | None:
    """The hyperparameter that enables the mode at ``path`` in ``distribution``."""
    return next((flag for flag, where in _TOGGLES if where == path), None)


def distribution(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """The ``distribution`` dict the flags in ``values`` name ({} where none is set), and
    what is wrong with them, located at the hyperparameter."""
    problems = [
        Problem(("hyperparameters", flag), why)
        for flag, why in _REFUSED.items()
        if values.get(flag) not in (None, "", [], {}, False, "false", "False")
    ]
    found: dict[str, Any] = {}
    for flag, path in _TOGGLES:
        if values.get(flag) not in _TRUE:
            continue
        options: dict[str, Any] = {"enabled": True}
        for option, owner, key in _OPTIONS:
            # An empty value is the SDK's way of giving none.
            if owner == flag and values.get(option) not in (None, ""):
                options[key] = _as_given(values[option])
        _put(found, path, options)
    parameters = values.get(MODEL_PARALLEL_PARAMETERS)
    if "mpi" in found and isinstance(parameters, Mapping):
        _put(found, ("smdistributed", "modelparallel"), {"enabled": True, "parameters": parameters})
    return found, problems


def flags(distribution: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters the SDK would have written for ``distribution``: what a job
    submitted another way shows a SageMaker client (DescribeTrainingJob)."""
    found: dict[str, Any] = {}
    enabled = _enabled_paths(distribution)
    for flag, path in _TOGGLES:
        if path not in enabled:
            continue
        found[flag] = True
        for option, owner, key in _OPTIONS:
            if owner == flag and enabled[path].get(key) not in (None, ""):
                found[option] = enabled[path][key]
    model_parallel = enabled.get(("smdistributed", "modelparallel"))
    if model_parallel is not None:
        found[MODEL_PARALLEL_PARAMETERS] = model_parallel.get("parameters", {})
    return found


def disagreements(given: Mapping[str, Any], named: Mapping[str, Any]) -> list[str]:
    """How a ``distribution`` a job gives differs from the one its flags name (both as
    dicts, modes not enabled left out), one phrase per difference; [] where they agree.
    An option the flags set must be given the same value; one they leave out may be
    given any."""
    found = []
    given_modes, named_modes = _enabled_paths(given), _enabled_paths(named)
    for path in sorted(named_modes.keys() - given_modes.keys()):
        name = ".".join(path)
        found.append(
            f"hyperparameters.{_flag_name(path)} enables {name}, which distribution does not"
        )
    for path in sorted(given_modes.keys() - named_modes.keys()):
        found.append(f"distribution enables {'.'.join(path)}, which the hyperparameters do not")
    for path in sorted(named_modes.keys() & given_modes.keys()):
        for key, value in named_modes[path].items():
            if given_modes[path].get(key) != value:
                where = f"distribution.{'.'.join(path)}.{key}"
                stated = given_modes[path].get(key)
                found.append(
                    f"hyperparameters.{_option_name(path, key)} is {value!r} and {where} "
                    + ("is not given" if stated is None else f"is {stated!r}")
                )
    return found


def _as_given(value: Any) -> Any:
    # The wire carries every value as a string: a count arrives as "2".
    digits = isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10
    return int(value) if digits else value


def hyperparameter_at(loc: tuple[str | int, ...]) -> str:
    """The hyperparameter that gave the part of ``distribution`` at ``loc`` (a location
    inside the dict these flags name), for an error to name what the user wrote."""
    parts = tuple(str(part) for part in loc)
    for size in range(len(parts), 0, -1):
        path = parts[:size]
        if flag_of(path):
            rest = parts[size:]
            return _option_name(path, rest[0]) if rest else _flag_name(path)
    if parts[:2] == ("smdistributed", "modelparallel"):
        return MODEL_PARALLEL_PARAMETERS
    return ""


def at_flags(problems: list[Problem]) -> list[Problem]:
    """``problems`` of a distribution these flags named, each located at the hyperparameter
    that gave the part it concerns, where the user wrote it."""
    return [
        Problem(("hyperparameters", *filter(None, [hyperparameter_at(p.loc[1:])])), p.message)
        if p.loc[:1] == ("distribution",)
        else p
        for p in problems
    ]


def _put(tree: dict[str, Any], path: tuple[str, ...], options: dict[str, Any]) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = options


def _enabled_paths(
    tree: Mapping[str, Any], under: tuple[str, ...] = ()
) -> dict[tuple[str, ...], dict[str, Any]]:
    """Every enabled mode's options in ``tree``, by its path; a key without ``enabled``
    is a group of modes (``smdistributed``)."""
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    for key, value in tree.items():
        if not isinstance(value, Mapping):
            continue
        if value.get("enabled") is True:
            found[(*under, key)] = dict(value)
        elif "enabled" not in value:
            found.update(_enabled_paths(value, (*under, key)))
    return found


def _flag_name(path: tuple[str, ...]) -> str:
    return flag_of(path) or MODEL_PARALLEL_PARAMETERS


def _option_name(path: tuple[str, ...], key: str) -> str:
    flag = flag_of(path)
    for option, owner, option_key in _OPTIONS:
        if owner == flag and option_key == key:
            return option
    return _flag_name(path)
