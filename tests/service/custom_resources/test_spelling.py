"""The resource's spelling of the request model: camelCase fields made by one rule from the
model's own names, read back into the REST API's names by the same schema, free maps left
as their authors wrote them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from service.custom_resources import crd, spelling
from service.custom_resources.structural import UnsupportedSchema, structural
from service.jobs.schemas import JobCreate

# A resource's spec, as a kubectl user writes it.
RESOURCE_SPEC: dict[str, Any] = {
    "entryPoint": "train.py",
    "sourceUri": "s3://bucket/code.tar.gz",
    "instanceType": "ml.g5.xlarge",
    "instanceCount": 2,
    "hyperparameters": {"learning_rate": 0.1, "epochs": 3},
    "environment": {"NCCL_DEBUG": "INFO"},
    "inputs": {"train_data": {"uri": "s3://bucket/train", "inputMode": "FastFile"}},
    "distribution": {
        "smdistributed": {
            "modelparallel": {"enabled": True, "parameters": {"pipeline_parallel_degree": 2}}
        },
        "mpi": {"enabled": True, "processesPerHost": 4},
    },
    "checkpointS3Uri": "s3://bucket/checkpoints",
    "retryRules": [{"onExitCodes": [137], "action": "retry"}],
    "maxRetryAttempts": 1,
    "useSpotInstances": True,
    "maxWait": 7200,
    "maxRun": 3600,
    "tags": [{"key": "team", "value": "vision"}],
}


def test_a_resource_spec_reads_as_the_rest_apis_request() -> None:
    request = spelling.to_request(RESOURCE_SPEC, crd.request_schema())
    assert request == {
        "entry_point": "train.py",
        "source_uri": "s3://bucket/code.tar.gz",
        "instance_type": "ml.g5.xlarge",
        "instance_count": 2,
        # The keys of free maps are their author's: a hyperparameter, a variable, a
        # channel's name, a library's parameter.
        "hyperparameters": {"learning_rate": 0.1, "epochs": 3},
        "environment": {"NCCL_DEBUG": "INFO"},
        "inputs": {"train_data": {"uri": "s3://bucket/train", "input_mode": "FastFile"}},
        "distribution": {
            "smdistributed": {
                "modelparallel": {"enabled": True, "parameters": {"pipeline_parallel_degree": 2}}
            },
            "mpi": {"enabled": True, "processes_per_host": 4},
        },
        "checkpoint_s3_uri": "s3://bucket/checkpoints",
        "retry_rules": [{"on_exit_codes": [137], "action": "retry"}],
        "max_retry_attempts": 1,
        "use_spot_instances": True,
        "max_wait": 7200,
        "max_run": 3600,
        "tags": [{"key": "team", "value": "vision"}],
    }
    parsed = JobCreate.model_validate(request)
    assert parsed.inputs["train_data"].input_mode == "FastFile"
    assert parsed.distribution.as_dict()["mpi"]["processes_per_host"] == 4


def test_a_key_the_schema_does_not_name_is_kept_for_the_model_to_refuse() -> None:
    request = spelling.to_request({"instanceType": "ml.m5.large", "gpus": 2}, crd.request_schema())
    assert request == {"instance_type": "ml.m5.large", "gpus": 2}


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        (("instance_type",), "instanceType"),
        (("inputs", "train_data", "input_mode"), "inputs.train_data.inputMode"),
        (("distribution", "mpi", "processes_per_host"), "distribution.mpi.processesPerHost"),
        (("retry_rules", 0, "on_exit_codes", 1), "retryRules.0.onExitCodes.1"),
        (("hyperparameters", "sagemaker_program"), "hyperparameters.sagemaker_program"),
        (("no_such_field", "below"), "no_such_field.below"),
    ],
)
def test_a_place_in_the_request_is_named_as_the_resource_spells_it(
    loc: tuple[str | int, ...], path: str
) -> None:
    assert spelling.field_path(loc, crd.request_schema()) == path


class _Part(BaseModel):
    some_value: int = Field(description="Quoted: `new_field`, `unrelated_word`.")


class _Grown(BaseModel):
    new_field: str
    parts: dict[str, _Part] = Field(default_factory=dict)
    listed: list[_Part] = Field(default_factory=list)


def test_a_field_added_to_the_model_is_spelled_and_read_back_with_nothing_else_edited() -> None:
    snake = structural(_Grown.model_json_schema())
    schema = spelling.resource_schema(snake)
    assert {"newField", "parts", "listed"} <= set(schema["properties"])
    part = schema["properties"]["parts"]["additionalProperties"]
    assert "someValue" in part["properties"]
    # Names of fields quoted in descriptions follow; other words do not.
    assert part["properties"]["someValue"]["description"] == (
        "Quoted: `newField`, `unrelated_word`."
    )
    # Required under its new name by a rule; the old name refused.
    rules = {rule["fieldPath"]: rule for rule in schema["x-kubernetes-validations"]}
    assert rules[".newField"]["rule"] == "has(self.newField)"
    assert rules[".new_field"]["rule"] == "!has(self.new_field)"
    assert "required" not in schema
    written = {"newField": "x", "parts": {"a_b": {"someValue": 1}}, "listed": [{"someValue": 2}]}
    assert spelling.to_request(written, snake) == {
        "new_field": "x",
        "parts": {"a_b": {"some_value": 1}},
        "listed": [{"some_value": 2}],
    }


class _Clashing(BaseModel):
    max_run: int
    maxRun: int  # the clash under test


def test_two_fields_of_one_spelling_are_refused() -> None:
    with pytest.raises(UnsupportedSchema, match="spelled 'maxRun'"):
        spelling.resource_schema(structural(_Clashing.model_json_schema()))
