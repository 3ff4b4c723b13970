"""``smdistributed.modelparallel``'s parameters: which ones Runyard runs, their types and
defaults, and which combinations can run on a job's ranks.

The API refuses a job whose parameters fail here (a 422 naming the parameter); the
model-parallel library (``libraries.modelparallel``) reads them with ``parse`` and trusts them.
Keys are SageMaker's names; an allow-list, so a parameter of SageMaker's that Runyard
does not implement is refused rather than ignored.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from contract.problems import Problem

# The hyperparameter that carries the parameters to the script, as SageMaker's SDK sends
# them (and so SM_HP_MP_PARAMETERS in the script's environment).
HYPERPARAMETER = "mp_parameters"
PIPELINES = ("simple", "interleaved")
PLACEMENTS = ("cluster", "spread")
OPTIMIZE = ("speed", "memory")
# What ``optimize`` makes of ``memory_weight`` where a job leaves it out, as SageMaker
# documents: the auto partition balances compute above all for speed, memory for memory.
MEMORY_WEIGHT_FOR = {"speed": 0.2, "memory": 0.8}

# SageMaker's parameters that Runyard accepts only at the value that turns them off.
_ONLY_AT = {
    "shard_optimizer_state": False,
    "horovod": False,
    "fp32_grad_accumulation": False,
    # Undocumented switches of SageMaker's pipeline that its GPT-2 example passes to
    # smp.init, off by default.
    "static_mode": False,
    "fast_mode": False,
}
# SageMaker's parameters that change nothing in how Runyard's library runs: accepted.
_NO_EFFECT = ("contiguous", "active_microbatches", "ddp_port", "ddp_dist_backend")


@dataclass(frozen=True)
class Parameters:
    """The parameters with SageMaker's defaults where a job leaves one out."""

    partitions: int = 1
    microbatches: int = 1
    pipeline: str = "interleaved"
    auto_partition: bool = True
    default_partition: int = 0
    # None: as ``optimize`` says (``balance_memory_weight``).
    memory_weight: float | None = None
    optimize: str = "memory"
    placement_strategy: str = "cluster"
    ddp: bool = False
    sharded_data_parallel_degree: int = 1
    tensor_parallel_degree: int = 1
    # The ranks of a tensor-parallel group are fed one batch (its rows chosen by
    # ``rdp_rank``) rather than each its own (``libraries.modelparallel.batches``).
    prescaled_batch: bool = False
    offload_activations: bool = False
    activation_loading_horizon: int = 4
    fp16: bool = False
    bf16: bool = False
    delayed_parameter_initialization: bool = False
    skip_tracing: bool = False

    @property
    def balance_memory_weight(self) -> float:
        """The auto partition's weight of memory against compute: the job's
        ``memory_weight``, or the one its ``optimize`` implies."""
        if self.memory_weight is not None:
            return self.memory_weight
        return MEMORY_WEIGHT_FOR[self.optimize]


_ALIASES = {"pipeline_parallel_degree": "partitions"}
_TYPES: dict[str, type] = {f.name: type(f.default) for f in fields(Parameters)} | {
    "memory_weight": float
}


def _check_value(name: str, value: Any) -> str | None:
    kind = _TYPES[name]
    # bool is an int in Python: a degree of True is a mistake, not 1.
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        return f"must be a whole number, not {value!r}"
    if kind is bool and not isinstance(value, bool):
        return f"must be true or false, not {value!r}"
    if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
        return f"must be a number, not {value!r}"
    if kind is str and not isinstance(value, str):
        return f"must be a string, not {value!r}"
    return _RANGES.get(name, lambda _: None)(value)


def _at_least(lowest: int) -> Callable[[Any], str | None]:
    return lambda value: None if value >= lowest else f"must be at least {lowest}, not {value}"


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str | None]:
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}"


_RANGES: dict[str, Callable[[Any], str | None]] = {
    "partitions": _at_least(1),
    "microbatches": _at_least(1),
    "default_partition": _at_least(0),
    "sharded_data_parallel_degree": _at_least(1),
    "tensor_parallel_degree": _at_least(1),
    "activation_loading_horizon": _at_least(1),
    "memory_weight": lambda v: None if 0 <= v <= 1 else f"must be between 0 and 1, not {v}",
    "pipeline": _one_of(PIPELINES),
    "placement_strategy": _one_of(PLACEMENTS),
    "optimize": _one_of(OPTIMIZE),
}


def under(job: Mapping[str, Any], script: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters a script's ``smp.init(config)`` runs with: the job's, and the
    script's for what the job leaves out, as SageMaker's library merges them (the job's
    ``distribution`` wins). A parameter is the job's when it gives it under either name."""
    given = {_ALIASES.get(key, key) for key in job}
    kept = {key: value for key, value in script.items() if _ALIASES.get(key, key) not in given}
    return {**kept, **job}


def parse(raw: Mapping[str, Any]) -> Parameters:
    """The parameters of a job that ``problems`` found none in (aliases resolved)."""
    known = {f.name for f in fields(Parameters)}
    values = {_ALIASES.get(key, key): value for key, value in raw.items()}
    return Parameters(**{key: value for key, value in values.items() if key in known})


def problems(
    raw: Any, world_size: int, loc: tuple[str | int, ...], *, final: bool = True
) -> list[Problem]:
    """Why these parameters cannot run on ``world_size`` ranks: each parameter's own
    problems first, then the combination's. ``final``: these are all the parameters the
    library runs with (``smp.init``'s); a job's ``distribution`` alone is not, since its
    script's ``smp.init(config)`` may give what the job leaves out, so a combination
    that is wrong only by a default the job left out is not refused there."""
    if not isinstance(raw, Mapping):
        return [Problem(loc, "must be an object of parameters")]
    found = _each_parameter(raw, loc)
    if found:
        return found
    given = {_ALIASES.get(key, key) for key in raw}
    return _combination(parse(raw), world_size, loc, lambda name: final or name in given)


def _each_parameter(raw: Mapping[str, Any], loc: tuple[str | int, ...]) -> list[Problem]:
    found = []
    for key, value in raw.items():
        name = _ALIASES.get(key, key)
        if name in _ONLY_AT:
            if value != _ONLY_AT[name] or type(value) is not type(_ONLY_AT[name]):
                message = f"Runyard runs only {_ONLY_AT[name]!r} here, not {value!r}"
                found.append(Problem((*loc, key), message))
        elif key in _NO_EFFECT:
            continue
        elif name not in _TYPES:
            found.append(Problem((*loc, key), _unknown(key)))
        elif (why := _check_value(name, value)) is not None:
            found.append(Problem((*loc, key), why))
    given = [key for key in raw if _ALIASES.get(key, key) == "partitions"]
    if len(given) == 2 and raw[given[0]] != raw[given[1]]:
        found.append(Problem((*loc, given[1]), f"differs from {given[0]}, its other name"))
    return found


def _unknown(key: str) -> str:
    names = [*_TYPES, *_ALIASES, *_ONLY_AT, *_NO_EFFECT]
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"not a model-parallel parameter Runyard runs{hint}"


def _combination(
    p: Parameters, world_size: int, loc: tuple[str | int, ...], settled: Callable[[str], bool]
) -> list[Problem]:
    """``settled(name)``: whether the parameter's value is the one the library will run
    with (given, or the parameters are final)."""
    found = []

    def refuse(key: str, message: str) -> None:
        found.append(Problem((*loc, key), message))

    if world_size % p.partitions:
        refuse("partitions", f"{p.partitions} does not divide the job's {world_size} processes")
        return found
    replicas = world_size // p.partitions
    if p.tensor_parallel_degree > 1:
        degree = p.tensor_parallel_degree
        if replicas % degree:
            refuse(
                "tensor_parallel_degree",
                f"{degree} does not divide the job's {replicas} data-parallel processes",
            )
        if p.partitions > 1 and p.delayed_parameter_initialization:
            refuse(
                "delayed_parameter_initialization",
                "Runyard does not make parameters late for tensor parallelism inside "
                "pipeline stages (tensor_parallel_degree > 1 with partitions > 1)",
            )
        replicas //= degree
    if p.default_partition >= p.partitions:
        refuse("default_partition", f"must be below partitions ({p.partitions})")
    if p.sharded_data_parallel_degree > 1:
        degree = p.sharded_data_parallel_degree
        if p.partitions > 1:
            refuse(
                "sharded_data_parallel_degree",
                "cannot be combined with pipeline parallelism (partitions > 1), as in SageMaker",
            )
        elif replicas % degree:
            refuse(
                "sharded_data_parallel_degree",
                f"{degree} does not divide the job's {replicas} data-parallel processes",
            )
    if replicas > 1 and not p.ddp:
        refuse("ddp", f"must be true: the job has {replicas} model replicas to keep in step")
    if p.fp16 and p.bf16:
        refuse("bf16", "fp16 and bf16 may not both be true")
    if (
        p.partitions > 1
        and p.pipeline == "interleaved"
        and p.microbatches < p.partitions
        and settled("microbatches")
    ):
        refuse(
            "microbatches",
            f"the interleaved pipeline needs at least as many as partitions ({p.partitions}), "
            f"not {p.microbatches}",
        )
    return found
