"""A record of the contract goes to JSON and back by its fields' annotations alone: absent
keys take their defaults, present ones must be of their field's kind, and the error names
the field."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

import pytest
from pydantic import Field

from contract import json_records
from contract.instance_config import (
    NO_SANDBOX,
    JobDescription,
    Placement,
    RunyardConfig,
    Sandbox,
)

Port = Annotated[int, Field(gt=0, lt=65536, strict=True, description="a TCP port number")]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Example:
    name: str
    port: Port
    words: tuple[str, ...] = ()
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    spare: Port | None = None


def test_a_record_reads_back_what_was_written_with_its_keys_in_field_order() -> None:
    written = Example(name="a", port=80, words=("x", "y"), labels={"k": "v"}, spare=8080)
    data = json.loads(json.dumps(json_records.dump(written)))
    assert list(data) == ["name", "port", "words", "labels", "spare"]
    assert json_records.load(Example, data, what="example") == written


def test_absent_keys_take_their_defaults_and_unknown_keys_are_ignored() -> None:
    read = json_records.load(Example, {"name": "a", "port": 1, "later": True}, what="x")
    assert read == Example(name="a", port=1)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"port": 1}, "example is missing 'name'"),
        ({"name": "a", "port": 70000}, "port must be a TCP port number, not 70000"),
        ({"name": "a", "port": True}, "port must be a TCP port number, not True"),
        ({"name": "a", "port": 1, "spare": "80"}, "spare must be a TCP port number, not '80'"),
        ({"name": "a", "port": 1, "words": [1]}, "words must be "),
        ({"name": "a", "port": 1, "labels": []}, "labels must be "),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_naming_its_field(
    data: dict[str, Any], said: str
) -> None:
    with pytest.raises(json_records.RecordError) as refused:
        json_records.load(Example, data, what="example")
    assert said in str(refused.value)


def test_runyard_json_is_made_of_the_jobs_description_its_placement_and_its_sandbox() -> None:
    job = JobDescription(
        job_name="job-1", job_id="0" * 32, entry_point="t.py", source_uri="s", output_path="o"
    )
    placement = Placement(master_addr="algo-1", master_port=7777, agent_port=7077)
    config = RunyardConfig.of(job, placement, Sandbox(ssh=True))
    parts = (JobDescription, Placement, Sandbox)
    names = [item.name for part in parts for item in dataclasses.fields(part)]
    # Each field once, in one of the three parts: none is the config's own.
    assert [item.name for item in dataclasses.fields(RunyardConfig)] == names
    assert (config.job_name, config.agent_port, config.ssh) == ("job-1", 7077, True)
    assert RunyardConfig.from_json(json.loads(config.to_json())) == config
    # A backend that gives machines of their own leaves the sandbox at "none".
    alone = RunyardConfig.of(job, placement)
    assert all(getattr(alone, item.name) == item.default for item in dataclasses.fields(NO_SANDBOX))
