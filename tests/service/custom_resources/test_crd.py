"""The TrainingJob CRD: generated from the REST API's request model, spelled in camelCase
with the model's own descriptions, structural as the API server requires, and refusing bad
resources (the REST API's snake_case spelling among them) by its schema with the field
named."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic.alias_generators import to_camel

from service.custom_resources import crd, names, spelling
from service.custom_resources.structural import UnsupportedSchema, structural
from service.jobs.schemas import JobCreate
from service.tuning.schemas import TuningJobCreate
from tests.kube import admission_problems

CHART = Path(__file__).parents[3] / "charts" / "runyard"
CHECKED_IN = CHART / "crds" / "trainingjobs.yaml"
# The floor of the chart's kubeVersion (">=1.30.0-0"): every field the CRD uses is there.
OLDEST = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"].removeprefix(">=")
OLDEST = OLDEST.removesuffix("-0")


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
            "entryPoint": "train.py",
            "sourceUri": "s3://bucket/code.tar.gz",
            "instanceType": "ml.g5.xlarge",
            **spec,
        },
    }


def test_the_chart_holds_the_generated_crd() -> None:
    assert CHECKED_IN.read_text() == crd.render(), "regenerate it with `make crd`"


def test_the_chart_holds_the_generated_tuning_crd() -> None:
    plural = names.TUNING_JOB.plural
    checked_in = CHART / "crds" / f"{plural}.yaml"
    assert checked_in.read_text() == crd.render(plural), "regenerate it with `make crd`"


@pytest.mark.parametrize("version", [OLDEST, kubernetes_validate.utils.latest_version()])
def test_the_crd_is_a_valid_custom_resource_definition(version: str) -> None:
    document = yaml.safe_load(CHECKED_IN.read_text())
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


def _fields(schema: dict[str, Any]) -> dict[str, Any]:
    """The fields a node declares, less those kept only to refuse the REST spelling."""
    return {
        name: child
        for name, child in (schema.get("properties") or {}).items()
        if not child.get("description", "").startswith("Not a field")
    }


def test_spec_is_the_request_model_in_camel_case_less_what_the_resource_says_otherwise() -> None:
    spec = _schema()["properties"]["spec"]
    taken = set(JobCreate.model_fields) - set(crd.NOT_IN_SPEC)
    assert set(_fields(spec)) == {to_camel(name) for name in taken}
    assert {"entryPoint", "instanceType", "checkpointS3Uri", "useSpotInstances"} <= set(
        spec["properties"]
    )
    assert spec["properties"]["hyperparameters"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "description": JobCreate.model_fields["hyperparameters"].description,
    }
    channel = spec["properties"]["inputs"]["additionalProperties"]
    assert channel["properties"]["inputMode"]["enum"] == ["File", "Pipe", "FastFile"]
    # A reference inlined, null made nullable.
    mpi = spec["properties"]["distribution"]["properties"]["mpi"]
    assert mpi["nullable"] is True
    assert mpi["properties"]["processesPerHost"]["maximum"] == 64
    # Required by a rule, not by `required`, which would keep the API server from
    # evaluating the rules that name a field's new spelling.
    assert "required" not in spec
    assert {"rule": "has(self.instanceType)", "fieldPath": ".instanceType"}.items() <= next(
        rule for rule in spec["x-kubernetes-validations"] if "instanceType" in rule["rule"]
    ).items()


def _described(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, child in _fields(schema).items():
        yield f"{path}.{name}", child
        yield from _described(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _described(schema[key], f"{path}.*")


def test_kubectl_explain_reads_the_models_descriptions_in_the_resources_spelling() -> None:
    spec = _schema()["properties"]["spec"]
    for name, child in _fields(spec).items():
        assert child.get("description"), f"spec.{name} has no description"
    for path, child in _described(spec, "spec"):
        # A field named in a description is named as the resource spells it.
        for quoted in re.findall(r"`([a-z][a-zA-Z0-9_]*)`", child.get("description", "")):
            assert "_" not in quoted or quoted not in _snake_names(), f"{path}: `{quoted}`"
    described = spec["properties"]["checkpointLocalPath"]["description"]
    assert described == JobCreate.model_fields["checkpoint_local_path"].description
    assert "`retryRules`" in spec["properties"]["maxRetryAttempts"]["description"]
    assert spec["properties"]["entry_point"]["description"].startswith("Not a field")


def _snake_names() -> set[str]:
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.update(name for name in node.get("properties") or {} if "_" in name)
            for value in node.values():
                walk(value)

    walk(crd.request_schema())
    return found


def test_printer_columns_show_the_job() -> None:
    version = crd.definition()["spec"]["versions"][0]
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns == {
        "Status": ".status.status",
        "Secondary": ".status.secondaryStatus",
        "InstanceType": ".spec.instanceType",
        "Instances": ".spec.instanceCount",
        "Age": ".metadata.creationTimestamp",
        "Duration": ".status.duration",
    }
    # Each column a field the schema has.
    spec = _schema()["properties"]["spec"]["properties"]
    for path in columns.values():
        if path.startswith(".spec."):
            assert path.removeprefix(".spec.") in spec
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"instanceCount": 4, "distribution": {"torchDistributed": {"enabled": True}}},
        {"hyperparameters": {"epochs": 3, "lr": "0.1", "nested": {"a": [1]}}},
        # A map's keys are its author's, however spelled.
        {"hyperparameters": {"learning_rate": 0.1, "sagemaker_program": "train.py"}},
        {"environment": {"NCCL_DEBUG": "INFO", "my_setting": "1"}},
        {"inputs": {"train_data": {"uri": "s3://bucket/train", "inputMode": "FastFile"}}},
        {"distribution": {"mpi": {"enabled": True, "processesPerHost": 8}}},
        {
            "distribution": {
                "smdistributed": {
                    "modelparallel": {
                        "enabled": True,
                        "parameters": {"pipeline_parallel_degree": 2},
                    }
                },
                "mpi": {"enabled": True},
            }
        },
        {"progressMetric": None, "maxWait": None, "distribution": {"mpi": None}},
        {"tags": [{"key": "team", "value": "vision"}]},
        {"retryRules": [{"onExitCodes": [137], "action": "retry"}], "maxRetryAttempts": 2},
    ],
)
def test_good_resources_are_admitted(spec: dict[str, Any]) -> None:
    assert admission_problems(_schema(), _resource(**spec)) == []


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"instanceCount": 0}, "spec.instanceCount: Invalid value: 0 is less than the minimum"),
        ({"instanceCount": "two"}, "spec.instanceCount: Invalid value: 'two' is not of type"),
        ({"volumeSize": 20000}, "spec.volumeSize: Invalid value: 20000 is greater than"),
        (
            {"inputs": {"train": {"uri": "s3://b/t", "inputMode": "Stream"}}},
            "spec.inputs.train.inputMode: Invalid value: 'Stream' is not one of",
        ),
        (
            {"distribution": {"torchDistribute": {"enabled": True}}},
            "spec.distribution: Invalid value: Additional properties are not allowed",
        ),
        (
            {"distribution": {"mpi": {"processesPerHost": 65}}},
            "spec.distribution.mpi.processesPerHost: Invalid value: 65 is greater than",
        ),
        ({"tags": [{"value": "x"}]}, "spec.tags.0: Invalid value: 'key' is a required property"),
        ({"name": "other"}, "spec: Invalid value: Additional properties are not allowed"),
        ({"baseJobName": "other"}, "spec: Invalid value: Additional properties are not allowed"),
        ({"maxRun": 0}, "spec.maxRun: Invalid value: 0 is less than the minimum"),
    ],
)
def test_bad_resources_are_refused_with_the_field_named(spec: dict[str, Any], named: str) -> None:
    problems = admission_problems(_schema(), _resource(**spec))
    assert any(problem.startswith(named) for problem in problems), problems


def test_a_resource_without_an_instance_type_is_refused() -> None:
    resource = _resource()
    del resource["spec"]["instanceType"]
    problems = admission_problems(_schema(), resource)
    assert problems == ["spec.instanceType: Required value: a TrainingJob needs instanceType"]


def test_a_resource_in_the_rest_apis_spelling_is_refused_naming_each_field_as_it_is() -> None:
    # The body of POST /v1/training-jobs, as the resource took it before.
    rest = {
        "entry_point": "train.py",
        "source_uri": "s3://bucket/code.tar.gz",
        "instance_type": "ml.g5.xlarge",
        "instance_count": 2,
        "hyperparameters": {"epochs": 3},
    }
    resource = _resource()
    resource["spec"] = rest
    problems = admission_problems(_schema(), resource)
    assert problems == [
        "spec.instanceType: Required value: a TrainingJob needs instanceType",
        "spec.entry_point: Forbidden: a TrainingJob spells its fields in camelCase: "
        "entryPoint, not entry_point",
        "spec.source_uri: Forbidden: a TrainingJob spells its fields in camelCase: "
        "sourceUri, not source_uri",
        "spec.instance_type: Forbidden: a TrainingJob spells its fields in camelCase: "
        "instanceType, not instance_type",
        "spec.instance_count: Forbidden: a TrainingJob spells its fields in camelCase: "
        "instanceCount, not instance_count",
    ]


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        (
            {"inputs": {"train": {"uri": "s3://b/t", "input_mode": "Pipe"}}},
            "spec.inputs.train.input_mode: Forbidden: a TrainingJob spells its fields in "
            "camelCase: inputMode, not input_mode",
        ),
        (
            {"distribution": {"torch_distributed": {"enabled": True}}},
            "spec.distribution.torch_distributed: Forbidden: a TrainingJob spells its fields "
            "in camelCase: torchDistributed, not torch_distributed",
        ),
        (
            {"distribution": {"mpi": {"enabled": True, "processes_per_host": 2}}},
            "spec.distribution.mpi.processes_per_host: Forbidden: a TrainingJob spells its "
            "fields in camelCase: processesPerHost, not processes_per_host",
        ),
        (
            {"retryRules": [{"on_exit_codes": [1], "action": "retry"}]},
            "spec.retryRules.0.on_exit_codes: Forbidden: a TrainingJob spells its fields in "
            "camelCase: onExitCodes, not on_exit_codes",
        ),
    ],
)
def test_a_field_in_the_rest_spelling_is_refused_at_any_depth(
    spec: dict[str, Any], named: str
) -> None:
    assert admission_problems(_schema(), _resource(**spec)) == [named]


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
        (
            {"anyOf": [{"type": "string"}, {"type": "object", "properties": {}}]},
            "a union of 2 kinds",
        ),
        ({"type": "object", "patternProperties": {"^a": {"type": "string"}}}, "patternProperties"),
        ({"$ref": "#/$defs/Missing"}, "is not to a definition"),
        ({"description": "anything at all"}, "no type"),
    ],
)
def test_what_has_no_structural_form_is_refused(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(UnsupportedSchema, match=why):
        structural(schema)


def test_a_value_of_several_scalar_kinds_is_kept_for_the_model_to_judge() -> None:
    """A categorical range's values may be text, numbers or booleans: the CRD keeps
    whatever is written, and the controller's model refuses what is none of them."""
    schema = {
        "anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}],
        "description": "A value.",
    }
    assert structural(schema) == {
        "description": "A value.",
        "x-kubernetes-preserve-unknown-fields": True,
    }


# -- what the docs and examples show -------------------------------------------------------

DOCS = (CHART.parents[1] / "docs" / "kubernetes-resources.md").read_text()
EXAMPLE = CHART.parents[1] / "examples" / "kubernetes" / "trainingjob.yaml"


def _shown_resources() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS, re.DOTALL)
    shown = [yaml.safe_load(block) for block in blocks]
    return [*shown, yaml.safe_load(EXAMPLE.read_text())]


def test_the_resources_the_docs_and_examples_show_are_admitted_and_read_as_requests() -> None:
    resources = _shown_resources()
    kinds = [resource["kind"] for resource in resources]
    assert kinds.count(names.KIND) >= 2
    assert kinds.count(names.TUNING_JOB.kind) >= 1
    tuning_schema = crd.tuning_definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for resource in resources:
        name = resource["metadata"]["name"]
        if resource["kind"] == names.TUNING_JOB.kind:
            assert admission_problems(tuning_schema, resource) == [], name
            request = spelling.to_request(resource["spec"], crd.tuning_request_schema())
            TuningJobCreate.model_validate({**request, "name": name})
            continue
        assert resource["kind"] == names.KIND
        assert admission_problems(_schema(), resource) == [], name
        request = spelling.to_request(resource["spec"], crd.request_schema())
        JobCreate.model_validate({**request, "name": name})


def test_the_refusal_the_docs_show_is_the_schemas() -> None:
    block = DOCS.split("is refused at `kubectl apply`", 1)[1].split("```", 2)[1]
    shown = [line.removeprefix("* ") for line in block.splitlines() if line.startswith("* ")]
    resource = _resource()
    resource["spec"] = {"entry_point": "train.py", "instance_type": "ml.g5.xlarge"}
    problems = admission_problems(_schema(), resource)
    assert shown
    assert set(shown) <= set(problems), problems
