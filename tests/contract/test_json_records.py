"""The one reader of Runyard's JSON records: a record reads back as written, and a value
that does not fit its field's annotation is refused with the path to it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest

from contract import json_records
from contract.json_records import RecordError


@dataclass(frozen=True)
class Address:
    host: str
    port: Annotated[int, json_records.PORT]


@dataclass(frozen=True, kw_only=True)
class Sample:
    name: str
    addresses: list[Address]
    primary: Address | None = None
    tags: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    retries: Annotated[int, json_records.COUNT] = 0
    timeout: Annotated[float | None, json_records.SECONDS] = None
    enabled: bool = False


WRITTEN = Sample(
    name="job",
    addresses=[Address("algo-1", 22), Address("algo-2", 2222)],
    primary=Address("algo-1", 22),
    tags=("a", "b"),
    labels={"team": "ml"},
    extra={"nested": [1, {"x": None}]},
    retries=3,
    timeout=2.5,
    enabled=True,
)


def test_a_record_reads_back_through_json_as_written() -> None:
    data = json.loads(json.dumps(json_records.to_data(WRITTEN)))
    assert list(data) == [
        "name",
        "addresses",
        "primary",
        "tags",
        "labels",
        "extra",
        "retries",
        "timeout",
        "enabled",
    ]
    assert data["addresses"][1] == {"host": "algo-2", "port": 2222}
    read = json_records.read(Sample, data)
    assert read == WRITTEN
    # Lists come back as the field's own kind: a tuple where it is one.
    assert isinstance(read.tags, tuple)
    assert isinstance(read.addresses, list)


def test_an_absent_key_is_its_fields_default_and_a_whole_number_reads_as_seconds() -> None:
    read = json_records.read(Sample, {"name": "job", "addresses": [], "timeout": 3})
    assert read == Sample(name="job", addresses=[], timeout=3.0)
    assert isinstance(read.timeout, float)


@pytest.mark.parametrize(
    ("change", "key", "problem"),
    [
        ({"name": 7}, "name", "must be a string, not 7"),
        ({"addresses": {"algo-1": 22}}, "addresses", "must be a list"),
        (
            {"addresses": [{"host": "algo-1", "port": 70000}]},
            "addresses[0].port",
            "must be a TCP port number",
        ),
        (
            {"addresses": [{"host": "algo-1", "port": "22"}]},
            "addresses[0].port",
            "must be a TCP port number, not '22'",
        ),
        ({"addresses": [{"host": "algo-1"}]}, "addresses[0].port", "is missing"),
        ({"addresses": ["algo-1"]}, "addresses[0]", "must be a mapping"),
        ({"primary": {"host": "h", "port": True}}, "primary.port", "must be a TCP port number"),
        ({"tags": ["a", 1]}, "tags[1]", "must be a string"),
        ({"labels": {"team": None}}, "labels.team", "must be a string"),
        ({"retries": -1}, "retries", "must be a whole number, not -1"),
        ({"retries": 1.5}, "retries", "must be a whole number"),
        ({"timeout": -1}, "timeout", "must be a number of seconds"),
        ({"enabled": "yes"}, "enabled", "must be true or false"),
        ({"enabled": 1}, "enabled", "must be true or false"),
    ],
)
def test_a_value_that_does_not_fit_is_refused_with_its_path(
    change: dict[str, Any], key: str, problem: str
) -> None:
    data = {**json_records.to_data(WRITTEN), **change}
    with pytest.raises(RecordError) as refused:
        json_records.read(Sample, data)
    assert refused.value.key == key
    assert refused.value.problem.startswith(problem)


def test_a_missing_field_and_an_unknown_key() -> None:
    with pytest.raises(RecordError) as missing:
        json_records.read(Sample, {"addresses": []})
    assert (missing.value.key, missing.value.missing) == ("name", True)
    # A key the record lacks is a newer writer's, left alone; refused where asked.
    data = {"name": "job", "addresses": [], "later": 1}
    assert json_records.read(Sample, data) == Sample(name="job", addresses=[])
    with pytest.raises(RecordError, match=r"^later is not one of its keys"):
        json_records.read(Sample, data, known_keys_only=True)
    with pytest.raises(RecordError, match=r"^the record must be a mapping"):
        json_records.read(Sample, ["job"])
