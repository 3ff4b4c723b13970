"""SageMaker's search expressions, on training jobs as Search sees them: each a
``TrainingJob`` record (a dict, as DescribeTrainingJob answers with its ``Tags``), with
``Metrics`` beside it.

A property is named by its path (``ResourceConfig.InstanceType``); a map's key
(``Tags.<key>``, ``HyperParameters.<name>``, ``Environment.<name>``, ``Metrics.<name>``)
is the whole rest of the name, dots and all; a path through a list matches when any
element does. Values compare by the property's type: times (``Value`` in ISO 8601, as
SageMaker takes it, or epoch seconds), numbers, and text; text that reads as a number (a
hyperparameter) compares as one with a number, as SageMaker's does.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from botocore.model import StructureShape

from service.sagemaker import shapes
from service.sagemaker.errors import validation

# Property names whose rest is one key of a map, dots and all.
_MAPS = {"Tags", "HyperParameters", "Environment", "Metrics"}
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "GreaterThan": lambda a, b: a > b,
    "GreaterThanOrEqualTo": lambda a, b: a >= b,
    "LessThan": lambda a, b: a < b,
    "LessThanOrEqualTo": lambda a, b: a <= b,
}
Document = Mapping[str, Any]
Test = Callable[[Document], bool]


# -- properties --------------------------------------------------------------------------


@functools.cache
def record_members() -> frozenset[str]:
    """The members of SageMaker's TrainingJob record, as botocore's model has them."""
    shape = shapes.service_model(shapes.SAGEMAKER).shape_for("TrainingJob")
    assert isinstance(shape, StructureShape)
    return frozenset(shape.members)


def check_property(name: str, member: str) -> None:
    head = name.split(".", 1)[0]
    if head not in record_members() and head not in _MAPS:
        raise validation(f"{member}: {name!r} is not a property of a training job")


def values(doc: Any, name: str) -> list[Any]:
    """Every value at the property's path (several through a list; none if it is
    missing)."""
    head, _, rest = name.partition(".")
    if isinstance(doc, list):
        return [value for item in doc for value in values(item, name)]
    if not isinstance(doc, Mapping):
        return []
    if head == "Tags" and rest and "Tags" in doc and isinstance(doc["Tags"], list):
        return [tag["Value"] for tag in doc["Tags"] if tag["Key"] == rest]
    if head not in doc:
        return []
    value = doc[head]
    if not rest:
        return [
            item for item in (value if isinstance(value, list) else [value]) if item is not None
        ]
    if head in _MAPS and isinstance(value, Mapping):
        return [value[rest]] if rest in value else []
    return values(value, rest)


# -- the expression ----------------------------------------------------------------------


def compiled(expression: Mapping[str, Any], path: str) -> Test:
    """The expression as a test of a job's document; a refusal names the member at fault,
    its path starting with ``path``. Contains is case-sensitive."""
    tests = [
        _filter(item, f"{path}.Filters.{index}")
        for index, item in enumerate(expression.get("Filters") or [], start=1)
    ]
    tests += [
        _nested(item, f"{path}.NestedFilters.{index}")
        for index, item in enumerate(expression.get("NestedFilters") or [], start=1)
    ]
    tests += [
        compiled(item, f"{path}.SubExpressions.{index}")
        for index, item in enumerate(expression.get("SubExpressions") or [], start=1)
    ]
    combine = any if expression.get("Operator", "And") == "Or" else all
    if not tests:
        return lambda doc: True
    return lambda doc: combine(test(doc) for test in tests)


def heads(expression: Mapping[str, Any]) -> set[str]:
    """The properties the expression tests, each by its first name (``Tags`` of
    ``Tags.team``), at every depth: what a job must be read with to be tested."""
    found = {item["Name"].split(".", 1)[0] for item in expression.get("Filters") or []}
    found |= {
        item["NestedPropertyName"].split(".", 1)[0]
        for item in expression.get("NestedFilters") or []
    }
    for item in expression.get("SubExpressions") or []:
        found |= heads(item)
    return found


def terms(expression: Mapping[str, Any]) -> int:
    """How many filters, nested filters and subexpressions, at every depth."""
    subexpressions = expression.get("SubExpressions") or []
    return (
        len(expression.get("Filters") or [])
        + len(expression.get("NestedFilters") or [])
        + len(subexpressions)
        + sum(terms(item) for item in subexpressions)
    )


def _nested(nested: Mapping[str, Any], path: str) -> Test:
    """Matches when one element of the list property satisfies every filter."""
    parent = nested["NestedPropertyName"]
    check_property(parent, f"{path}.NestedPropertyName")
    relative = []
    for index, item in enumerate(nested["Filters"], start=1):
        name = item["Name"]
        if not name.startswith(parent + "."):
            raise validation(
                f"{path}.Filters.{index}.Name: {name!r} is not a property of {parent!r}"
            )
        relative.append(
            _filter(
                {**item, "Name": name[len(parent) + 1 :]}, f"{path}.Filters.{index}", nested=True
            )
        )

    def test(doc: Document) -> bool:
        elements = values(doc, parent)
        return any(all(check(element) for check in relative) for element in elements)

    return test


def _filter(item: Mapping[str, Any], path: str, *, nested: bool = False) -> Test:
    name = item["Name"]
    if not nested:
        check_property(name, f"{path}.Name")
    operator = item.get("Operator", "Equals")
    if operator in ("Exists", "NotExists"):
        wanted = operator == "Exists"
        return lambda doc: bool(values(doc, name)) == wanted
    if "Value" not in item:
        raise validation(f"{path}.Value: the {operator} operator needs a value")
    given = item["Value"]
    if operator in _COMPARISONS:
        if _number(given) is None and _time(given) is None:
            raise validation(
                f"{path}.Value: {operator} compares numbers and times (ISO 8601); "
                f"{given[:64]!r} is neither"
            )
        compare = _COMPARISONS[operator]
        return lambda doc: any(_compared(value, given, compare) for value in values(doc, name))
    if operator == "Contains":
        return lambda doc: any(given in _text(value) for value in values(doc, name))
    if operator == "In":
        choices = [choice.strip() for choice in given.split(",")]
        return lambda doc: any(_equal(value, c) for value in values(doc, name) for c in choices)
    equal: Test = lambda doc: any(_equal(value, given) for value in values(doc, name))  # noqa: E731
    return equal if operator == "Equals" else (lambda doc: not equal(doc))


def _compared(value: Any, given: str, compare: Callable[[Any, Any], bool]) -> bool:
    if isinstance(value, datetime):
        when = _time(given)
        return when is not None and compare(value, when)
    number, wanted = _number(value), _number(given)
    return number is not None and wanted is not None and compare(number, wanted)


def _equal(value: Any, given: str) -> bool:
    if isinstance(value, datetime):
        return value == _time(given)
    if isinstance(value, bool):
        return given.lower() == str(value).lower()
    if isinstance(value, int | float):
        return value == _number(given)
    return bool(_text(value) == given)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, datetime):
        return value.isoformat()
    return value if isinstance(value, str) else json.dumps(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _time(given: str) -> datetime | None:
    """An ISO 8601 time (UTC unless it names a zone) or epoch seconds."""
    try:
        when = datetime.fromisoformat(given)
    except ValueError:
        number = _number(given)
        try:
            return None if number is None else datetime.fromtimestamp(number, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def visibility(conditions: list[dict[str, str]]) -> Test:
    """VisibilityConditions: tags the results must carry, each with its value."""
    wanted = []
    for index, condition in enumerate(conditions, start=1):
        key = condition.get("Key", "")
        if not key.startswith("Tags."):
            raise validation(f"VisibilityConditions.{index}.Key: must be Tags.<key>")
        wanted.append((key, condition.get("Value", "")))
    return lambda doc: all(value in values(doc, key) for key, value in wanted)
