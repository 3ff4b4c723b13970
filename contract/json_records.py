"""Frozen dataclasses to JSON and back, with the standard library alone (the training
image has nothing else, so pydantic is not an option here): the reader is driven by each
field's annotation, so a record's keys, their types and their limits are written once, in
its class, and a new field needs no reader of its own.

A value is read strictly where its key is present (its type, and the ``Rule`` its
annotation carries) and leniently where absent (its field's default): a file written
before a field existed still reads. What it reads: ``str``, ``int``, ``float``, ``bool``,
``X | None``, ``tuple[X, ...]``, ``list[X]``, ``dict[str, X]``, ``Any`` and other such
dataclasses, nested.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass
from typing import Annotated, Any, TypeVar

Record = TypeVar("Record")


class RecordError(ValueError):
    """A value does not fit its field, or a required one is missing (``missing``): ``key``
    is the path to it (``ports[1].address``), ``problem`` what is wrong, for the caller to
    put in its own words."""

    def __init__(self, key: str, problem: str, *, missing: bool = False) -> None:
        super().__init__(f"{key} {problem}")
        self.key = key
        self.problem = problem
        self.missing = missing


@dataclass(frozen=True)
class Rule:
    """What a present value must be beyond its type: ``Annotated[int, PORT]``."""

    holds: Callable[[Any], bool]
    # What the error says the value must be ("a TCP port number").
    description: str


# Each holds for a value its type admits (a None is never checked).
PORT = Rule(lambda value: 0 < value < 65536, "a TCP port number")
COUNT = Rule(lambda value: value >= 0, "a whole number")
SECONDS = Rule(lambda value: 0 <= value < 1e9, "a number of seconds")


def to_data(record: Any) -> Any:
    """``record`` as JSON's values: each dataclass a mapping of its fields in their order,
    tuples as lists. Not ``dataclasses.asdict``: that deep-copies every value first."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {item.name: to_data(getattr(record, item.name)) for item in _fields(type(record))}
    if isinstance(record, list | tuple):
        return [to_data(value) for value in record]
    if isinstance(record, dict):
        return {key: to_data(value) for key, value in record.items()}
    return record


def read(cls: type[Record], data: Any, *, known_keys_only: bool = False) -> Record:
    """``cls`` made from ``data`` (as ``to_data`` wrote it); RecordError names what is wrong."""
    return cls(**values(cls, data, known_keys_only=known_keys_only))


def values(cls: type, data: Any, *, known_keys_only: bool = False, at: str = "") -> dict[str, Any]:
    """The fields of ``cls`` that ``data`` gives, read: for a record built with more than
    ``data`` holds. ``known_keys_only``: a key that is not a field is an error (elsewhere it
    is left alone, as a newer writer's)."""
    if not isinstance(data, Mapping):
        raise RecordError(at.rstrip(".") or "the record", f"must be a mapping, not {data!r}")
    hints = _hints(cls)
    if known_keys_only:
        unknown = sorted(str(key) for key in data if key not in hints)
        if unknown:
            raise RecordError(f"{at}{unknown[0]}", "is not one of its keys")
    read_values = {}
    for item in _fields(cls):
        if item.name in data:
            read_values[item.name] = _value(hints[item.name], data[item.name], at + item.name)
        elif item.default is MISSING and item.default_factory is MISSING:
            raise RecordError(f"{at}{item.name}", "is missing", missing=True)
    return read_values


def _value(hint: Any, value: Any, key: str) -> Any:
    rule = None
    if typing.get_origin(hint) is Annotated:
        hint, *extras = typing.get_args(hint)
        rule = next((extra for extra in extras if isinstance(extra, Rule)), None)
    read_value = _typed(hint, value, key, rule)
    if rule is not None and read_value is not None and not rule.holds(read_value):
        raise RecordError(key, f"must be {rule.description}, not {value!r}")
    return read_value


def _typed(hint: Any, value: Any, key: str, rule: Rule | None) -> Any:
    def refuse(what: str) -> RecordError:
        return RecordError(key, f"must be {rule.description if rule else what}, not {value!r}")

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        [inner] = [arg for arg in args if arg is not type(None)]
        return _typed(inner, value, key, rule)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint(**values(hint, value, at=f"{key}."))
    if hint is bool:
        if not isinstance(value, bool):
            raise refuse("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise refuse("a whole number")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise refuse("a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise refuse("a string")
        return value
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise refuse("a list")
        inner = args[0] if args else Any
        items = [_value(inner, each, f"{key}[{index}]") for index, each in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping) or not all(isinstance(name, str) for name in value):
            raise refuse("a mapping of names")
        inner = args[1] if args else Any
        return {name: _value(inner, each, f"{key}.{name}") for name, each in value.items()}
    raise TypeError(f"{key}: json_records cannot read a {hint!r}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # Resolved once per class: the annotations are strings (``from __future__``).
    return typing.get_type_hints(cls, include_extras=True)


@functools.cache
def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)
