"""The distribution a job names in its hyperparameters, as the SageMaker SDK writes it.

The SDK turns an estimator's ``distribution`` dict into hyperparameters
(``sagemaker_mpi_enabled``, ``sagemaker_mpi_num_of_processes_per_host``, ...), and
SageMaker's containers choose their launcher from those alone; boto3 users and the
training toolkits' own tests pass them directly. Runyard reads them back into the
``distribution`` dict its modes are enabled by, on every way in. Each mode's names are in
its record (``contract.modes``, ``Mode.sagemaker_flags``); this module reads and writes
them for every mode alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract import modes
from contract.problems import Problem

# A flag's value as the SDK writes it (JSON ``true``) or a person might (a Python bool).
_TRUE = (True, "true", "True", "TRUE")


def _named_modes() -> dict[tuple[str, ...], modes.SageMakerFlags]:
    """The names of each mode the SDK names, by where its options are in ``distribution``:
    first the modes with a flag of their own, then those named beside the flag of the mode
    they run under (each in ``MODES``' order)."""
    named = {mode.path: mode.sagemaker_flags for mode in modes.MODES if mode.sagemaker_flags}
    return dict(sorted(named.items(), key=lambda item: item[1].enabled is None))


_FLAGGED = _named_modes()

# What SageMaker's containers run and Runyard does not: refused, naming the flag.
_REFUSED = {
    "sagemaker_distribution_instance_groups": "heterogeneous instance groups are not supported",
    "sagemaker_pytorch_xla_multi_worker_enabled": "PyTorch/XLA is not supported",
}


def flag_of(path: tuple[str, ...]) -> str | None:
    """The hyperparameter that enables the mode at ``path`` in ``distribution``."""
    named = _FLAGGED.get(path)
    return None if named is None else named.enabled


def distribution(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """The ``distribution`` dict the flags in ``values`` name ({} where none is set), and
    what is wrong with them, located at the hyperparameter."""
    problems = [
        Problem(("hyperparameters", flag), why)
        for flag, why in _REFUSED.items()
        if values.get(flag) not in (None, "", [], {}, False, "false", "False")
    ]
    found: dict[str, Any] = {}
    for path, named in _FLAGGED.items():
        options: dict[str, Any] = {"enabled": True}
        if named.enabled is not None:
            if values.get(named.enabled) not in _TRUE:
                continue
            for key, option in named.options.items():
                # An empty value is the SDK's way of giving none.
                if values.get(option) not in (None, ""):
                    options[key] = _as_given(values[option])
        else:
            given = {key: values.get(option) for key, option in named.options.items()}
            if not _under_enabled(path, found) or not all(
                isinstance(value, Mapping) for value in given.values()
            ):
                continue
            options.update(given)
        _put(found, path, options)
    return found, problems


def flags(distribution: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters the SDK would have written for ``distribution``: what a job
    submitted another way shows a SageMaker client (DescribeTrainingJob)."""
    found: dict[str, Any] = {}
    enabled = _enabled_paths(distribution)
    for path, named in _FLAGGED.items():
        if path not in enabled:
            continue
        if named.enabled is not None:
            found[named.enabled] = True
            for key, option in named.options.items():
                if enabled[path].get(key) not in (None, ""):
                    found[option] = enabled[path][key]
        else:
            # What names the mode: written even where the job gave no options.
            for key, option in named.options.items():
                found[option] = enabled[path].get(key, {})
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
        if path in _FLAGGED:
            rest = parts[size:]
            return _option_name(path, rest[0]) if rest else _flag_name(path)
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


def _under_enabled(path: tuple[str, ...], found: Mapping[str, Any]) -> bool:
    """Whether the mode at ``path`` runs under a mode already found enabled."""
    under = modes.by_name(".".join(path)).runs_under
    return under is not None and (tuple(under.split(".")) in _enabled_paths(found))


def _flag_name(path: tuple[str, ...]) -> str:
    """The hyperparameter that names the mode at ``path``: its flag, or for a mode without
    one, its first option's."""
    named = _FLAGGED.get(path)
    if named is None:
        return ""
    return named.enabled or next(iter(named.options.values()), "")


def _option_name(path: tuple[str, ...], key: str) -> str:
    named = _FLAGGED.get(path)
    option = None if named is None else named.options.get(key)
    return option or _flag_name(path)
