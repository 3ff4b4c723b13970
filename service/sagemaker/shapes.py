"""Requests checked against botocore's own service models, the definition of the wire.

botocore checks only required members, types and minimums before it sends; everything
else the model says (maximum lengths and values, enums, patterns, unknown members) is
checked here, so any client (boto3, the SDKs, curl) gets SageMaker's
``ValidationException`` naming the member, never a 500 or a silent drop. An integer
member without bounds of its own is held to its type's (32 or 64 bits), and one too
long to convert arrives as a ``TooLong`` (``service.kit.integers``) and is refused as
out of range. Values are not repeated in messages: an environment value may be a
secret.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any

import botocore.session
import regex
from botocore.model import OperationModel, ServiceModel, Shape, StructureShape

from service.kit.integers import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, TooLong
from service.kit.text import unstorable
from service.sagemaker.errors import AwsError

SAGEMAKER = "sagemaker"
LOGS = "logs"
CLOUDWATCH = "cloudwatch"
STS = "sts"
# AWS writes its patterns for Java; the ``regex`` module reads them (``\p{L}``, ``\p{Alnum}``).
_PATTERN_FLAGS = regex.VERSION1
# Runyard's extension: where SageMaker reads an S3 URI, a file:// URI under the server's
# file roots works too (as SageMaker local mode's FileDataSource).
_ALSO_FILE_URIS = frozenset({"S3Uri"})
# Enums this server decides itself: the instance types are its catalog's (``local`` among
# them), refused by the job's own checks naming what this server runs.
_OWN_ENUMS = frozenset({"TrainingInstanceType"})
_ENUM_SHOWN = 12
# How deep a request's members may nest (each list index counts as a level): far below
# what recursion allows, far above what any operation needs.
_MAX_DEPTH = 64


@functools.cache
def service_model(name: str) -> ServiceModel:
    return botocore.session.get_session().get_service_model(name)


def operation(service: str, name: str) -> OperationModel | None:
    model = service_model(service)
    return model.operation_model(name) if name in model.operation_names else None


def check_input(operation_model: OperationModel, params: Any) -> dict[str, Any]:
    """``params`` if they satisfy the operation's input shape; else ValidationException
    listing each problem as SageMaker words it."""
    if not isinstance(params, dict):
        raise AwsError("SerializationException", "The request body must be a JSON object.")
    shape = operation_model.input_shape
    problems: list[str] = []
    if shape is not None:
        _check(shape, params, "", problems)
    elif params:
        problems.append("The operation takes no parameters.")
    if problems:
        shown = problems[:10]
        raise AwsError(
            "ValidationException",
            f"{len(problems)} validation error{'s' * (len(problems) > 1)} detected: "
            + "; ".join(shown),
        )
    return params


def _check(shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    if path.count(".") > _MAX_DEPTH:
        # A shape that holds itself (Search's SubExpressions) must not cost a recursion
        # per level of whatever a client nests.
        problems.append(_at(path, f"Member is nested more than {_MAX_DEPTH} levels deep"))
        return
    kind = shape.type_name
    checker = _CHECKERS.get(kind)
    if checker is None:  # a type this server does not take from clients
        problems.append(_at(path, f"Member of type {kind} is not accepted"))
        return
    checker(shape, value, path, problems)


def _structure(shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    if not isinstance(value, dict):
        problems.append(_at(path, "Member must be an object"))
        return
    assert isinstance(shape, StructureShape)
    for name in shape.required_members:
        if value.get(name) is None:
            problems.append(_at(_join(path, name), "Member must not be null"))
    for name, item in value.items():
        member = shape.members.get(name)
        if member is None:
            problems.append(_at(_join(path, name), "Member is not known to this server"))
        elif item is not None:
            _check(member, item, _join(path, name), problems)


def _list(shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    if not isinstance(value, list):
        problems.append(_at(path, "Member must be a list"))
        return
    _length(shape, len(value), path, problems)
    for index, item in enumerate(value):
        _check(shape.member, item, f"{path}.{index + 1}", problems)


def _map(shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    if not isinstance(value, dict):
        problems.append(_at(path, "Member must be an object"))
        return
    _length(shape, len(value), path, problems)
    for key, item in value.items():
        _check(shape.key, key, f"{path}.key", problems)
        _check(shape.value, item, f"{path}.{_shown_key(key)}", problems)


def _string(shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    if not isinstance(value, str):
        problems.append(_at(path, "Member must be a string"))
        return
    # Anything may be stored (a request is kept to be echoed): NUL and lone surrogates
    # cannot be, in PostgreSQL.
    if (problem := unstorable(value)) is not None:
        problems.append(_at(path, f"Member {problem}"))
        return
    _length(shape, len(value), path, problems)
    enum = shape.enum
    if enum and value not in enum and shape.name not in _OWN_ENUMS:
        shown = sorted(enum)[:_ENUM_SHOWN] + ["..."] * (len(enum) > _ENUM_SHOWN)
        problems.append(_at(path, f"Member must satisfy enum value set: [{', '.join(shown)}]"))
    pattern = shape.metadata.get("pattern")
    if pattern and not _matches(shape.name, pattern, value):
        problems.append(_at(path, f"Member must satisfy regular expression pattern: {pattern}"))


def _integer(shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    if isinstance(value, bool) or not isinstance(value, int | TooLong):
        problems.append(_at(path, "Member must be an integer"))
        return
    amount = value.as_float() if isinstance(value, TooLong) else value
    # A member without bounds of its own holds what its type does (Java's int and long,
    # as AWS reads it): no larger number reaches a column or a conversion.
    low, high = _INTEGER_RANGES[shape.type_name]
    _within(shape, amount, "value", path, problems, low=low, high=high)


def _number(shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
        problems.append(_at(path, "Member must be a finite number"))
        return
    _bounds(shape, value, path, problems)


def _boolean(_shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    if not isinstance(value, bool):
        problems.append(_at(path, "Member must be a boolean"))


def _timestamp(_shape: Shape, value: Any, path: str, problems: list[str]) -> None:
    # AWS JSON 1.1 sends timestamps as epoch seconds.
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
        problems.append(_at(path, "Member must be a timestamp in epoch seconds"))


def _finite(value: float) -> bool:
    if isinstance(value, int):
        # Beyond a double's range (over 308 digits): math.isfinite would raise.
        return abs(value) <= sys.float_info.max
    return math.isfinite(value)


def _length(shape: Shape, length: int, path: str, problems: list[str]) -> None:
    _within(shape, length, "length", path, problems)


def _bounds(shape: Shape, value: float, path: str, problems: list[str]) -> None:
    _within(shape, value, "value", path, problems)


def _within(
    shape: Shape,
    amount: float,
    what: str,
    path: str,
    problems: list[str],
    *,
    low: float | None = None,
    high: float | None = None,
) -> None:
    """The model's ``min`` and ``max`` (else ``low`` and ``high``): of a length (strings,
    lists, maps) or a value."""
    low, high = shape.metadata.get("min", low), shape.metadata.get("max", high)
    if low is not None and amount < low:
        problems.append(_at(path, f"Member must have {what} greater than or equal to {low}"))
    if high is not None and amount > high:
        problems.append(_at(path, f"Member must have {what} less than or equal to {high}"))


_INTEGER_RANGES = {"integer": (INT32_MIN, INT32_MAX), "long": (INT64_MIN, INT64_MAX)}
_CHECKERS = {
    "structure": _structure,
    "list": _list,
    "map": _map,
    "string": _string,
    "integer": _integer,
    "long": _integer,
    "float": _number,
    "double": _number,
    "boolean": _boolean,
    "timestamp": _timestamp,
}


def _matches(shape_name: str, pattern: str, value: str) -> bool:
    if shape_name in _ALSO_FILE_URIS and value.startswith("file://"):
        return True
    return _compiled(pattern).fullmatch(value) is not None


@functools.cache
def _compiled(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern, flags=_PATTERN_FLAGS)


def _join(path: str, name: str) -> str:
    # SageMaker names members in lower camel case: resourceConfig.instanceCount.
    member = name[:1].lower() + name[1:]
    return f"{path}.{member}" if path else member


def _shown_key(key: object) -> str:
    text = str(key)
    return text if len(text) <= 40 else text[:40] + "..."


def _at(path: str, constraint: str) -> str:
    return f"Value at '{path or 'request'}' failed to satisfy constraint: {constraint}"
