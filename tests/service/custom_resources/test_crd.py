"""The TrainingJob CRD: generated from the REST API's request model, structural as the API
server requires, and refusing bad resources by its schema with the field named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.custom_resources import crd, names
from service.custom_resources.structural import UnsupportedSchema, structural
from tests.kube import admission_problems

CHECKED_IN = Path(__file__).parents[3] / "charts" / "runyard" / "crds" / "trainingjobs.yaml"


def _schema() -> dict[str, Any]:
    version = crd.definition()["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _resource(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": "bert-1", "namespace": "team-a"},
        "spec": {
            "entry_point": "train.py",
            "source_uri": "s3://bucket/code.tar.gz",
            "instance_type": "ml.g5.xlarge",
            **spec,
        },
    }


def test_the_chart_holds_the_generated_crd() -> None:
    assert CHECKED_IN.read_text() == crd.render(), "regenerate it with `make crd`"


def test_the_crd_is_a_valid_custom_resource_definition() -> None:
    document = yaml.safe_load(CHECKED_IN.read_text())
    version = kubernetes_validate.utils.latest_version()
    kubernetes_validate.validate(document, version, strict=True)


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def test_the_schema_is_structural() -> None:
    for node in _nodes(_schema()):
        assert not {"$ref", "$defs", "anyOf", "const", "default"} & node.keys(), node
        assert node.get("additionalProperties") is not False, node
        if "properties" in node or "items" in node:
            assert "type" in node, node


def test_spec_is_the_request_model_less_what_the_resource_says_otherwise() -> None:
    spec = _schema()["properties"]["spec"]
    assert spec["required"] == ["instance_type"]
    assert {"name", "base_job_name", "image"}.isdisjoint(spec["properties"])
    assert spec["properties"]["hyperparameters"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    channel = spec["properties"]["inputs"]["additionalProperties"]
    assert channel["properties"]["input_mode"]["enum"] == ["File", "Pipe", "FastFile"]
    # A reference inlined, null made nullable.
    mpi = spec["properties"]["distribution"]["properties"]["mpi"]
    assert mpi["nullable"] is True
    assert mpi["properties"]["processes_per_host"]["maximum"] == 64


def test_printer_columns_show_the_job() -> None:
    version = crd.definition()["spec"]["versions"][0]
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns == {
        "Status": ".status.status",
        "Secondary": ".status.secondaryStatus",
        "Instances": ".spec.instance_count",
        "Age": ".metadata.creationTimestamp",
        "Duration": ".status.duration",
    }
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"instance_count": 4, "distribution": {"torch_distributed": {"enabled": True}}},
        {"hyperparameters": {"epochs": 3, "lr": "0.1", "nested": {"a": [1]}}},
        {"inputs": {"train": {"uri": "s3://bucket/train", "input_mode": "FastFile"}}},
        {"distribution": {"mpi": {"enabled": True, "processes_per_host": 8}}},
        {"progress_metric": None, "max_wait": None},
        {"tags": [{"key": "team", "value": "vision"}]},
    ],
)
def test_good_resources_are_admitted(spec: dict[str, Any]) -> None:
    assert admission_problems(_schema(), _resource(**spec)) == []


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"instance_count": 0}, "spec.instance_count: Invalid value: 0 is less than the minimum"),
        ({"instance_count": "two"}, "spec.instance_count: Invalid value: 'two' is not of type"),
        ({"volume_size": 20000}, "spec.volume_size: Invalid value: 20000 is greater than"),
        (
            {"inputs": {"train": {"uri": "s3://b/t", "input_mode": "Stream"}}},
            "spec.inputs.train.input_mode: Invalid value: 'Stream' is not one of",
        ),
        (
            {"distribution": {"torch_distribute": {"enabled": True}}},
            "spec.distribution: Invalid value: Additional properties are not allowed",
        ),
        (
            {"distribution": {"mpi": {"processes_per_host": 65}}},
            "spec.distribution.mpi.processes_per_host: Invalid value: 65 is greater than",
        ),
        ({"tags": [{"value": "x"}]}, "spec.tags.0: Invalid value: 'key' is a required property"),
        ({"name": "other"}, "spec: Invalid value: Additional properties are not allowed"),
        ({"max_run": 0}, "spec.max_run: Invalid value: 0 is less than the minimum"),
    ],
)
def test_bad_resources_are_refused_with_the_field_named(spec: dict[str, Any], named: str) -> None:
    problems = admission_problems(_schema(), _resource(**spec))
    assert any(problem.startswith(named) for problem in problems), problems


def test_a_resource_without_an_instance_type_is_refused() -> None:
    resource = _resource()
    del resource["spec"]["instance_type"]
    problems = admission_problems(_schema(), resource)
    assert problems == ["spec: Invalid value: 'instance_type' is a required property"]


# -- the conversion itself -------------------------------------------------------------


def test_references_are_inlined_and_nulls_made_nullable() -> None:
    schema = {
        "type": "object",
        "properties": {
            "child": {"anyOf": [{"$ref": "#/$defs/Child"}, {"type": "null"}], "default": None},
            "size": {"type": "number", "exclusiveMinimum": 0, "title": "Size"},
            "mode": {"const": "x", "type": "string"},
        },
        "$defs": {"Child": {"type": "object", "properties": {"a": {"type": "integer"}}}},
    }
    assert structural(schema) == {
        "type": "object",
        "properties": {
            "child": {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "nullable": True,
            },
            "size": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
            "mode": {"enum": ["x"], "type": "string"},
        },
    }


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "a union of 2 kinds"),
        ({"type": "object", "patternProperties": {"^a": {"type": "string"}}}, "patternProperties"),
        ({"$ref": "#/$defs/Missing"}, "is not to a definition"),
        ({"description": "anything at all"}, "no type"),
    ],
)
def test_what_has_no_structural_form_is_refused(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(UnsupportedSchema, match=why):
        structural(schema)
