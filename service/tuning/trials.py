"""A trial as a training job: its name and its spec, from the tuning job's."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import ValidationError

from contract import hyperparameters
from service.jobs.schemas import JobCreate
from service.kit.errors import SpecError
from service.tuning.models import TuningJob
from service.tuning.schemas import Definition, ParameterRanges, TuningJobCreate, trial_tags

# Where a tuning job created over SageMaker's wire keeps its trials' CreateTrainingJob
# request (without a name), beside its own request and region: of its one
# TrainingJobDefinition, or of each of its TrainingJobDefinitions by name.
TRIALS_REQUEST = "trials_request"
TRIALS_REQUESTS = "trials_requests"
# The training job statuses of a trial still running (the rest have ended).
LIVE = frozenset({"InProgress", "Stopping"})


def trial_name(tuning_job_name: str, tuning_job_id: str, number: int) -> str:
    """``<tuning job>-<number>-<hash>``, as SageMaker names a tuning job's training jobs:
    the same trial of the same tuning job always has the same name, so a tuner that asks
    again for a trial it already submitted finds the name taken."""
    digest = hashlib.sha256(f"{tuning_job_id}:{number}".encode()).hexdigest()[:8]
    return f"{tuning_job_name}-{number:03d}-{digest}"


# Every trial's name ends so (its number, then its hash); most jobs' names do not.
TRIAL_NAME_END = re.compile(r"-[0-9]{3,}-[0-9a-f]{8}$")


def static_hyperparameters(definition: Definition) -> dict[str, Any]:
    """Every trial's hyperparameters but the tuned ones: the training job's, and as
    SageMaker adds to each, the objective's metric name (``_tuning_objective_metric``,
    which the runtime keeps from the script's arguments, as SageMaker's toolkit does)."""
    return {
        hyperparameters.TUNING_OBJECTIVE: definition.objective.metric_name,
        **definition.training_job.hyperparameters,
    }


def trial_spec(
    spec: TuningJobCreate, definition: Definition, name: str, parameters: dict[str, Any]
) -> JobCreate:
    """The training job of a trial: its definition's, named, with the tuned values among
    its hyperparameters. A value the job's rules refuse is said of its training job."""
    fields = definition.training_job.model_dump(exclude_unset=True)
    fields["name"] = name
    fields["hyperparameters"] = {**static_hyperparameters(definition), **parameters}
    if spec.tags:
        fields["tags"] = [tag.model_dump() for tag in trial_tags(spec, definition)]
    try:
        return JobCreate.model_validate(fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise SpecError((*definition.training_job_loc, *error["loc"]), error["msg"]) from None


def first_values(ranges: ParameterRanges) -> dict[str, Any]:
    """A value of each range (its lowest, its first): a trial to check the training job
    with before any trial is asked for."""
    return {
        **{item.name: item.min_value for item in ranges.continuous},
        **{item.name: item.min_value for item in ranges.integer},
        **{item.name: item.values[0] for item in ranges.categorical},
    }


def trial_request(
    tuning: TuningJob, name: str, parameters: dict[str, Any], definition: Definition
) -> dict[str, Any] | None:
    """For a tuning job created over SageMaker's wire, the CreateTrainingJob request its
    trial's training job shows (DescribeTrainingJob): the trials' request the wire made
    of the trial's training job definition (``TRIALS_REQUEST`` or, of several,
    ``TRIALS_REQUESTS``), named, with the tuned values."""
    kept = tuning.sagemaker_request
    if not kept:
        return None
    if definition.name is None:
        template = kept.get(TRIALS_REQUEST)
    else:
        template = (kept.get(TRIALS_REQUESTS) or {}).get(definition.name)
    if template is None:
        return None
    tuned = {
        key: wire_value(tuning, key, value, definition.name) for key, value in parameters.items()
    }
    metric = definition.objective.metric_name
    request = {
        **template,
        "TrainingJobName": name,
        "HyperParameters": {**with_objective(template.get("HyperParameters", {}), metric), **tuned},
    }
    return {"request": request, "region": kept["region"]}


def with_objective(given: dict[str, str], metric: str) -> dict[str, str]:
    """Static hyperparameters as SageMaker's wire writes them, with the objective's metric
    name that SageMaker adds (JSON-encoded, as the framework estimators' others are)
    where the request did not give it."""
    return {hyperparameters.TUNING_OBJECTIVE: hyperparameters.encode(metric), **given}


def wire_value(tuning: TuningJob, name: str, value: Any, definition: str | None = None) -> str:
    """A tuned value as SageMaker's wire writes it: a categorical value as the request
    gave it (JSON-encoded by the SDK's framework estimators, plain by others), any other
    as JSON."""
    for item in _wire_ranges(tuning, definition).get("CategoricalParameterRanges", []):
        if item.get("Name") == name:
            for given in item.get("Values", []):
                if hyperparameters.decode({name: given})[name] == value:
                    return str(given)
    return hyperparameters.encode(value)


def _wire_ranges(tuning: TuningJob, definition: str | None) -> dict[str, Any]:
    """The ranges of a trial's definition as the wire's request gave them ({} for a tuning
    job made through Runyard's own API)."""
    request = (tuning.sagemaker_request or {}).get("request") or {}
    if definition is None:
        config = request.get("HyperParameterTuningJobConfig") or {}
        one = request.get("TrainingJobDefinition") or {}
        return config.get("ParameterRanges") or one.get("HyperParameterRanges") or {}
    for given in request.get("TrainingJobDefinitions") or []:
        if given.get("DefinitionName") == definition:
            return given.get("HyperParameterRanges") or {}
    return {}
