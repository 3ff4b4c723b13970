"""One way between a frozen dataclass of the contract and the JSON object it is written
as: each field under its own name, read back by its annotation (pydantic's validation of
stdlib dataclasses), so that a new field needs no reader of its own.

Reading is lenient where a key is absent (the field's default: a file written by an
older server still reads) and strict where one is present: a value of the wrong kind is
refused, never taken for a default, with an error that names the field and says what it
must be. What a field must be beyond its type is said in its annotation:
``Annotated[int, Field(gt=0, lt=65536, description="a TCP port number")]``; the
description is what the error says.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

Record = TypeVar("Record")


class RecordError(ValueError):
    """A JSON object that is not the record: a field missing or of the wrong kind."""


def dump(record: object) -> dict[str, Any]:
    """``record`` as a JSON object, its keys in the order of its fields."""
    data: dict[str, Any] = _adapter(type(record)).dump_python(record, mode="json")
    return data


def load(kind: type[Record], data: Mapping[str, Any], *, what: str) -> Record:
    """The ``kind`` that ``data`` holds; RecordError naming the first bad field of it,
    with ``what`` (the file, say) for a missing one."""
    if not isinstance(data, Mapping):
        raise RecordError(f"{what} must be a JSON object")
    try:
        record: Record = _adapter(kind).validate_python(dict(data))
    except ValidationError as exc:
        raise RecordError(_first_problem(kind, exc, what)) from None
    return record


# One per record type, made at its first use: making one walks every annotation.
_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}
_DESCRIPTIONS: dict[type[Any], dict[str, str]] = {}


def _adapter(kind: type[Any]) -> TypeAdapter[Any]:
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def _first_problem(kind: type[Any], exc: ValidationError, what: str) -> str:
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "missing":
        return f"{what} is missing {name!r}"
    expected = _descriptions(kind).get(name) or error["msg"][0].lower() + error["msg"][1:]
    return f"{name} must be {expected}, not {error.get('input')!r}"


def _descriptions(kind: type[Any]) -> dict[str, str]:
    """Each field's description, where its annotation gives one."""
    if kind not in _DESCRIPTIONS:
        hints = typing.get_type_hints(kind, include_extras=True)
        described = {item.name: _description(hints[item.name]) for item in fields(kind)}
        _DESCRIPTIONS[kind] = {name: text for name, text in described.items() if text}
    return _DESCRIPTIONS[kind]


def _description(annotation: Any) -> str | None:
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, FieldInfo) and meta.description:
            return meta.description
    for argument in typing.get_args(annotation):  # inside `X | None`
        if (found := _description(argument)) is not None:
            return found
    return None
