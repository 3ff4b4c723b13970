"""The TrainingJob CustomResourceDefinition, generated: ``python -m
service.custom_resources.crd`` prints what ``charts/runyard/crds/trainingjobs.yaml`` holds
(``make crd`` writes it; a test holds the two equal).

The ``spec`` schema is the REST API's request model (``JobCreate``) made structural
(``structural``) and spelled in camelCase (``spelling``), less what the resource says
another way: the job's name is the resource's ``metadata.name`` (so ``name`` and
``base_job_name`` are not taken) and the image is the server's choice. Its descriptions
are the model's own, which ``kubectl explain trainingjob.spec`` shows. What a schema
cannot say is refused by the chart's ValidatingAdmissionPolicy (an instance type this
server does not run) or by the controller (a source that is not there, a quota), in the
resource's ``Accepted`` condition and a Warning Event that name the field.

The HyperparameterTuningJob's is made the same way from the tuning API's request model
(``TuningJobCreate``): its name is the resource's, and its training job takes no name and
no image, as a TrainingJob's spec does not. ``python -m service.custom_resources.crd
hyperparametertuningjobs`` prints it (``charts/runyard/crds/hyperparametertuningjobs.yaml``).
"""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel

from service.custom_resources import names, spelling
from service.custom_resources.status import ResourceStatus
from service.custom_resources.structural import structural
from service.custom_resources.tuning_status import TuningResourceStatus
from service.jobs.schemas import JobCreate
from service.jobs.spec_parts import NAME_PATTERN
from service.tuning import schemas as tuning

# Fields of JobCreate a resource does not take.
NOT_IN_SPEC = ("name", "base_job_name", "image")

_NAME_RULE = {
    "rule": f"self.metadata.name.size() <= 63 && self.metadata.name.matches('{NAME_PATTERN}')",
    "message": "metadata.name must be a training job's name: 1 to 63 letters, digits and "
    "hyphens, starting and ending with a letter or digit",
}
# A submitted job runs what it was submitted with: a change would silently do nothing.
_IMMUTABLE = {
    "rule": "self == oldSelf",
    "message": "spec cannot change once the job is submitted: delete the resource and "
    "apply it again",
}

_TUNING_NAME_RULE = {
    "rule": f"self.metadata.name.size() <= {tuning.MAX_NAME} && "
    f"self.metadata.name.matches('{tuning.NAME_PATTERN}')",
    "message": f"metadata.name must be a tuning job's name: {tuning.NAME_RULE}",
}
_IMMUTABLE_TUNING = {
    "rule": "self == oldSelf",
    "message": "spec cannot change once the tuning job is created: delete the resource and "
    "apply it again",
}
_TUNING_COLUMNS = [
    {"name": "Status", "type": "string", "jsonPath": ".status.status"},
    {"name": "Strategy", "type": "string", "jsonPath": ".spec.strategy"},
    {"name": "Ended", "type": "integer", "jsonPath": ".status.trialsEnded"},
    {"name": "Trials", "type": "integer", "jsonPath": ".status.maxTrials"},
    {"name": "Best", "type": "number", "jsonPath": ".status.bestTrial.objective"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

_COLUMNS = [
    {"name": "Status", "type": "string", "jsonPath": ".status.status"},
    {"name": "Secondary", "type": "string", "jsonPath": ".status.secondaryStatus"},
    {"name": "InstanceType", "type": "string", "jsonPath": ".spec.instanceType"},
    {"name": "Instances", "type": "integer", "jsonPath": ".spec.instanceCount"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Duration", "type": "string", "jsonPath": ".status.duration"},
]


@functools.cache
def request_schema() -> Mapping[str, Any]:
    """What a resource's spec is, as the REST API spells it (snake_case): the structural
    schema of the request model, less what the resource says another way. Shared: read it,
    never change it."""
    schema = structural(JobCreate.model_json_schema())
    for field in NOT_IN_SPEC:
        schema["properties"].pop(field)
    return schema


def spec_schema() -> dict[str, Any]:
    return _spec_schema(
        request_schema(),
        "The job, as POST /v1/training-jobs takes it, its fields spelled in camelCase "
        "(entry_point is entryPoint); its name is the resource's metadata.name.",
        _IMMUTABLE,
    )


def status_schema() -> dict[str, Any]:
    return _status_schema(
        ResourceStatus, "Written by Runyard's controller: the job as describe shows it."
    )


def _spec_schema(
    request: Mapping[str, Any], description: str, immutable: dict[str, str]
) -> dict[str, Any]:
    schema = spelling.resource_schema(copy.deepcopy(dict(request)))
    schema["description"] = description
    schema["x-kubernetes-validations"] = [*schema.get("x-kubernetes-validations", []), immutable]
    return schema


def _status_schema(model: type[BaseModel], description: str) -> dict[str, Any]:
    schema = structural(model.model_json_schema())
    schema["description"] = description
    return schema


@functools.cache
def tuning_request_schema() -> Mapping[str, Any]:
    """A HyperparameterTuningJob's spec as the tuning API spells it: the structural schema
    of its request model, less its name (the resource's) and its training job's name and
    image. Shared: read it, never change it."""
    schema = structural(tuning.TuningJobCreate.model_json_schema())
    schema["properties"].pop("name")
    schema["required"] = [field for field in schema.get("required", []) if field != "name"]
    training = schema["properties"]["training_job"]["properties"]
    for field in NOT_IN_SPEC:
        training.pop(field)
    return schema


def tuning_spec_schema() -> dict[str, Any]:
    return _spec_schema(
        tuning_request_schema(),
        "The tuning job, as POST /v1/tuning-jobs takes it, its fields spelled in camelCase "
        "(parameter_ranges is parameterRanges, the training job's entry_point "
        "trainingJob.entryPoint); its name is the resource's metadata.name.",
        _IMMUTABLE_TUNING,
    )


def tuning_status_schema() -> dict[str, Any]:
    return _status_schema(
        TuningResourceStatus,
        "Written by Runyard's controller: the tuning job as describe shows it.",
    )


def definition() -> dict[str, Any]:
    """The TrainingJob CRD."""
    return _definition(
        names.TRAINING_JOB,
        "A Runyard training job, submitted and followed with kubectl.",
        spec_schema(),
        status_schema(),
        _NAME_RULE,
        _COLUMNS,
    )


def tuning_definition() -> dict[str, Any]:
    """The HyperparameterTuningJob CRD."""
    return _definition(
        names.TUNING_JOB,
        "A Runyard hyperparameter tuning job, created and followed with kubectl.",
        tuning_spec_schema(),
        tuning_status_schema(),
        _TUNING_NAME_RULE,
        _TUNING_COLUMNS,
    )


def _definition(
    kind: names.Kind,
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    name_rule: dict[str, str],
    columns: list[dict[str, str]],
) -> dict[str, Any]:
    root = {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [name_rule],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.crd_name},
        "spec": {
            "group": names.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": ["runyard"],
            },
            "versions": [
                {
                    "name": names.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


DEFINITIONS = {
    names.TRAINING_JOB.plural: definition,
    names.TUNING_JOB.plural: tuning_definition,
}


def render(plural: str = names.PLURAL) -> str:
    command = "python -m service.custom_resources.crd"
    if plural != names.PLURAL:
        command += f" {plural}"
    header = f"# Generated by `{command}` (make crd): do not edit.\n"
    # A schema used in two places (an objective's, a training job's) is written out in
    # each: YAML's anchors and aliases would be read back the same, but a person reading
    # the CRD should not have to follow them.
    return header + yaml.dump(
        DEFINITIONS[plural](), Dumper=_WithoutAliases, sort_keys=False, width=100
    )


class _WithoutAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


if __name__ == "__main__":
    sys.stdout.write(render(*sys.argv[1:2]))
