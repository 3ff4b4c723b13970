"""CreateHyperParameterTuningJob's request as Runyard's tuning-job spec, and a tuning job
and its trials as DescribeHyperParameterTuningJob's and the listings' answers.

The training job definition (or each of several, TrainingJobDefinitions, with its own
TuningObjective and HyperParameterRanges) is read as CreateTrainingJob's request is
(``service.sagemaker.translate``), its StaticHyperParameters as the hyperparameters. As
there, what would change what runs and Runyard cannot do is refused naming the member:
completion criteria, instance configurations and Autotune are not offered yet.
The definition's RetryStrategy is each trial's training job's, which restarts that same job
(as SageMaker does); ResourceLimits.MaxRuntimeInSeconds is the tuning job's own limit.
TrainingJobEarlyStoppingType Auto and the Hyperband strategy (its StrategyConfig's
HyperbandStrategyConfig) are read into the spec, whose rules name the member.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from contract import hyperparameters, images
from service.kit.errors import SpecError
from service.sagemaker import translate
from service.sagemaker.errors import AwsError, validation
from service.tuning import progress
from service.tuning.models import TuningJob, TuningTrial
from service.tuning.schemas import (
    Definition,
    Objective,
    ParameterRanges,
    TuningJobCreate,
    stored,
)
from service.tuning.trials import (
    TRIALS_REQUEST,
    TRIALS_REQUESTS,
    static_hyperparameters,
    wire_value,
    with_objective,
)

CONFIG = "HyperParameterTuningJobConfig"
DEFINITION = "TrainingJobDefinition"
DEFINITIONS = "TrainingJobDefinitions"
WARM_START = "WarmStartConfig"
_REFUSED = {
    "Autotune": "Autotune is not supported",
}
# What the tuning job's configuration gives for its one TrainingJobDefinition, and each of
# several TrainingJobDefinitions gives for itself.
_PER_DEFINITION = {
    "HyperParameterTuningJobObjective": "TuningObjective",
    "ParameterRanges": "HyperParameterRanges",
}
_REFUSED_CONFIG = {
    "TuningJobCompletionCriteria": "completion criteria are not supported yet",
}
_REFUSED_RESOURCES = {
    "InstanceConfigs": "instance configurations to choose among are not supported yet; "
    "give InstanceType and InstanceCount",
    "AllocationStrategy": "instance configurations to choose among are not supported yet",
}
RESOURCES = "HyperParameterTuningResourceConfig"
# What HyperParameterTuningResourceConfig and ResourceConfig have in common.
_RESOURCE_MEMBERS = ("InstanceType", "InstanceCount", "VolumeSizeInGB", "VolumeKmsKeyId")
# The members of a definition that are the tuning job's, not its training jobs'.
_TUNING_MEMBERS = ("DefinitionName", "TuningObjective", "HyperParameterRanges")
_RANGE_KINDS = {
    "continuous": "ContinuousParameterRanges",
    "integer": "IntegerParameterRanges",
    "categorical": "CategoricalParameterRanges",
}


def tuning_spec(request: Mapping[str, Any], catalog: images.Catalog) -> TuningJobCreate:
    """The Runyard spec of a CreateHyperParameterTuningJob request (already checked
    against the service model)."""
    _refuse(request, _REFUSED, "")
    config = request[CONFIG]
    _refuse(config, _REFUSED_CONFIG, f"{CONFIG}.")
    limits = config["ResourceLimits"]
    fields: dict[str, Any] = {
        "name": request["HyperParameterTuningJobName"],
        "strategy": config["Strategy"],
        "resource_limits": {
            "max_number_of_training_jobs": limits.get("MaxNumberOfTrainingJobs"),
            "max_parallel_training_jobs": limits["MaxParallelTrainingJobs"],
            "max_runtime_in_seconds": limits.get("MaxRuntimeInSeconds"),
        },
        "random_seed": config.get("RandomSeed"),
        "early_stopping_type": config.get("TrainingJobEarlyStoppingType", "Off"),
        "tags": request.get("Tags") or [],
        **_definitions(request, catalog),
    }
    warm = request.get(WARM_START)
    if warm:
        fields["warm_start_config"] = {
            "warm_start_type": warm["WarmStartType"],
            "parent_tuning_jobs": [
                parent["HyperParameterTuningJobName"]
                for parent in warm["ParentHyperParameterTuningJobs"]
            ],
        }
    hyperband = (config.get("StrategyConfig") or {}).get("HyperbandStrategyConfig")
    if hyperband is not None:
        fields["strategy_config"] = {"hyperband_strategy_config": _hyperband(hyperband)}
    try:
        return TuningJobCreate.model_validate(fields)
    except ValidationError as exc:
        raise validation(
            "; ".join(
                f"{member_of(tuple(error['loc']))}: {error['msg']}" for error in exc.errors()[:5]
            )
        ) from None


def _definitions(request: Mapping[str, Any], catalog: images.Catalog) -> dict[str, Any]:
    """The spec's training job (its objective and ranges from the tuning job's
    configuration, or from the definition), or its several training job definitions."""
    config = request[CONFIG]
    several = request.get(DEFINITIONS)
    one = request.get(DEFINITION)
    if several and one:
        raise validation(f"{DEFINITIONS}: give {DEFINITION} or {DEFINITIONS}, not both")
    if several:
        for member, own in _PER_DEFINITION.items():
            if config.get(member):
                raise validation(
                    f"{CONFIG}.{member}: with {DEFINITIONS}, each definition gives its {own}"
                )
        return {
            "training_job_definitions": [
                _one_of_several(request, index, definition, catalog)
                for index, definition in enumerate(several)
            ]
        }
    if one is None:
        raise validation(f"{DEFINITION}: required")
    objective = config.get("HyperParameterTuningJobObjective") or one.get("TuningObjective")
    if objective is None:
        raise validation(f"{CONFIG}.HyperParameterTuningJobObjective: required")
    ranges = config.get("ParameterRanges") or one.get("HyperParameterRanges") or {}
    return {
        "objective": _objective(objective),
        "parameter_ranges": _ranges(ranges, f"{CONFIG}.ParameterRanges"),
        "training_job": _training_job(request, one, DEFINITION, catalog),
    }


def _one_of_several(
    request: Mapping[str, Any], index: int, definition: Mapping[str, Any], catalog: images.Catalog
) -> dict[str, Any]:
    where = f"{DEFINITIONS}.{index + 1}"
    for member in ("DefinitionName", "TuningObjective"):
        if member not in definition:
            raise validation(f"{where}.{member}: required")
    return {
        "definition_name": definition["DefinitionName"],
        "objective": _objective(definition["TuningObjective"]),
        "parameter_ranges": _ranges(
            definition.get("HyperParameterRanges") or {}, f"{where}.HyperParameterRanges"
        ),
        "training_job": _training_job(request, definition, where, catalog),
    }


def _objective(given: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": given["Type"], "metric_name": given["MetricName"]}


def _hyperband(given: Mapping[str, Any]) -> dict[str, Any]:
    """HyperbandStrategyConfig as the spec's (a StrategyConfig without it is none)."""
    return {
        field: given[member]
        for member, field in (("MinResource", "min_resource"), ("MaxResource", "max_resource"))
        if member in given
    }


def _refuse(given: Mapping[str, Any], refused: Mapping[str, str], path: str) -> None:
    for member, why in refused.items():
        if given.get(member) not in (None, {}, []):
            raise validation(f"{path}{member}: {why}")


def _training_job(
    request: Mapping[str, Any], definition: Mapping[str, Any], where: str, catalog: images.Catalog
) -> dict[str, Any]:
    _refuse(definition.get(RESOURCES) or {}, _REFUSED_RESOURCES, f"{where}.{RESOURCES}.")
    training = training_request(definition)
    # A name to check it by; each trial gets its own.
    training["TrainingJobName"] = request["HyperParameterTuningJobName"]
    try:
        spec = translate.job_spec(training, catalog)
    except AwsError as exc:  # naming CreateTrainingJob's members: the definition's
        raise validation(f"{where}.{exc.message}") from None
    fields = spec.model_dump(exclude_unset=True)
    fields.pop("name", None)
    return fields


def trials_requests(request: Mapping[str, Any]) -> dict[str, Any]:
    """What a tuning job keeps of its request for its trials' descriptions: the
    CreateTrainingJob request of its definition, or of each of its definitions by name."""
    several = request.get(DEFINITIONS)
    if several:
        return {
            TRIALS_REQUESTS: {
                definition["DefinitionName"]: training_request(definition) for definition in several
            }
        }
    return {TRIALS_REQUEST: training_request(request[DEFINITION])}


def training_request(definition: Mapping[str, Any]) -> dict[str, Any]:
    """A training job definition as the CreateTrainingJob request of its trials, less
    their name: the SDK's tuner gives the instances as HyperParameterTuningResourceConfig
    (with no configurations to choose among), a training job as ResourceConfig."""
    training = {k: v for k, v in definition.items() if k not in _TUNING_MEMBERS}
    training["HyperParameters"] = training.pop("StaticHyperParameters", None) or {}
    resources = training.pop(RESOURCES, None)
    if resources and "ResourceConfig" not in training:
        training["ResourceConfig"] = resources
    return training


def _ranges(ranges: Mapping[str, Any], place: str) -> dict[str, Any]:
    if ranges.get("AutoParameters"):
        raise validation(f"{place}.AutoParameters: not supported")
    found: dict[str, list[dict[str, Any]]] = {}
    for kind, member in _RANGE_KINDS.items():
        found[kind] = []
        for index, item in enumerate(ranges.get(member) or []):
            where = f"{place}.{member}.{index + 1}"
            if kind == "categorical":
                values = [hyperparameters.decode({"v": v})["v"] for v in item["Values"]]
                found[kind].append({"name": item["Name"], "values": values})
                continue
            read = int if kind == "integer" else float
            bounds = {}
            for bound in ("MinValue", "MaxValue"):
                try:
                    bounds[bound] = read(item[bound])
                except ValueError:
                    raise validation(f"{where}.{bound}: not {_a_number(kind)}") from None
            found[kind].append(
                {
                    "name": item["Name"],
                    "min_value": bounds["MinValue"],
                    "max_value": bounds["MaxValue"],
                    "scaling_type": item.get("ScalingType", "Auto"),
                }
            )
    return found


def _a_number(kind: str) -> str:
    return "an integer" if kind == "integer" else "a number"


_MEMBER_OF_FIELD = {
    "name": "HyperParameterTuningJobName",
    "strategy": f"{CONFIG}.Strategy",
    "random_seed": f"{CONFIG}.RandomSeed",
    "early_stopping_type": f"{CONFIG}.TrainingJobEarlyStoppingType",
    "tags": "Tags",
}
_HYPERBAND = f"{CONFIG}.StrategyConfig.HyperbandStrategyConfig"
_MEMBER_OF_PART = {
    "objective": (
        f"{CONFIG}.HyperParameterTuningJobObjective",
        {"type": "Type", "metric_name": "MetricName"},
    ),
    "resource_limits": (
        f"{CONFIG}.ResourceLimits",
        {
            "max_number_of_training_jobs": "MaxNumberOfTrainingJobs",
            "max_parallel_training_jobs": "MaxParallelTrainingJobs",
            "max_runtime_in_seconds": "MaxRuntimeInSeconds",
        },
    ),
}
_HYPERBAND_MEMBERS = {"min_resource": "MinResource", "max_resource": "MaxResource"}
_RANGE_MEMBERS = {
    "name": "Name",
    "min_value": "MinValue",
    "max_value": "MaxValue",
    "scaling_type": "ScalingType",
    "values": "Values",
}


def member_of(loc: tuple[str | int, ...]) -> str:
    """The request member a tuning spec's location came from."""
    if not loc:
        return "request"
    head, rest = str(loc[0]), loc[1:]
    if head == "training_job":
        return _training_member(DEFINITION, rest)
    if head == "training_job_definitions":
        return _member_of_definition(rest)
    if head in _MEMBER_OF_PART and rest:
        member, parts = _MEMBER_OF_PART[head]
        return f"{member}.{parts.get(str(rest[0]), str(rest[0]))}"
    if head == "warm_start_config":
        if rest and rest[0] == "parent_tuning_jobs":
            found = f"{WARM_START}.ParentHyperParameterTuningJobs"
            if len(rest) > 1 and isinstance(rest[1], int):
                found += f".{rest[1] + 1}.HyperParameterTuningJobName"
            return found
        return f"{WARM_START}.WarmStartType" if rest else WARM_START
    if head == "strategy_config":
        if len(rest) > 1:
            return f"{_HYPERBAND}.{_HYPERBAND_MEMBERS.get(str(rest[1]), str(rest[1]))}"
        return _HYPERBAND if rest else f"{CONFIG}.StrategyConfig"
    if head == "parameter_ranges":
        return _range_member(f"{CONFIG}.ParameterRanges", rest)
    return _MEMBER_OF_FIELD.get(head, head)


def _training_member(place: str, rest: tuple[str | int, ...]) -> str:
    inner = translate.member_of(rest)
    inner = inner.replace("HyperParameters", "StaticHyperParameters", 1)
    return f"{place}.{inner}"


def _member_of_definition(loc: tuple[str | int, ...]) -> str:
    """A location in one of ``training_job_definitions``, as TrainingJobDefinitions.N's."""
    if not loc or not isinstance(loc[0], int):
        return DEFINITIONS
    place = f"{DEFINITIONS}.{loc[0] + 1}"
    rest = loc[1:]
    if not rest:
        return place
    head, inner = str(rest[0]), rest[1:]
    if head == "training_job":
        return _training_member(place, inner)
    if head == "parameter_ranges":
        return _range_member(f"{place}.HyperParameterRanges", inner)
    if head == "objective":
        parts = _MEMBER_OF_PART["objective"][1]
        found = f"{place}.TuningObjective"
        return f"{found}.{parts.get(str(inner[0]), str(inner[0]))}" if inner else found
    return f"{place}.DefinitionName" if head == "definition_name" else f"{place}.{head}"


def _range_member(place: str, rest: tuple[str | int, ...]) -> str:
    found = place
    if rest:
        found += f".{_RANGE_KINDS.get(str(rest[0]), str(rest[0]))}"
    if len(rest) > 1 and isinstance(rest[1], int):
        found += f".{rest[1] + 1}"
    if len(rest) > 2:
        found += f".{_RANGE_MEMBERS.get(str(rest[2]), str(rest[2]))}"
    return found


def spec_error(exc: SpecError) -> Exception:
    """A refusal of the tuning job's spec, naming the request's member."""
    return validation(f"{member_of(exc.loc)}: {exc.field_message}")


# -- the other direction ------------------------------------------------------------------


def arn(tuning: TuningJob, region: str) -> str:
    account = translate.account_id(tuning.project)
    return f"arn:aws:sagemaker:{region}:{account}:hyper-parameter-tuning-job/{tuning.name}"


def region_of(tuning: TuningJob, region: str) -> str:
    return (tuning.sagemaker_request or {}).get("region") or region


def described(
    tuning: TuningJob, region: str, overall_best: TuningTrial | None = None
) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob's answer; ``overall_best``: a warm start's best
    trial of its own and its parents' (``service.tuning.warm_start.overall_best``)."""
    spec = stored(tuning.spec)
    region = region_of(tuning, region)
    request = (tuning.sagemaker_request or {}).get("request") or {}
    answer: dict[str, Any] = {
        **_summary_members(tuning, spec, region),
        CONFIG: request.get(CONFIG) or _config(spec),
        **_described_definitions(tuning, spec, request),
    }
    best = progress.best(tuning.trials, spec.objective_type)
    if best is not None:
        answer["BestTrainingJob"] = trial_summary(tuning, spec, best, region)
    if spec.warm_start_config is not None:
        answer[WARM_START] = request.get(WARM_START) or _warm_start(spec)
    if overall_best is not None:
        answer["OverallBestTrainingJob"] = trial_summary(
            overall_best.tuning_job, spec, overall_best, region
        )
    if tuning.failure_reason:
        answer["FailureReason"] = tuning.failure_reason
    return answer


def _described_definitions(
    tuning: TuningJob, spec: TuningJobCreate, request: Mapping[str, Any]
) -> dict[str, Any]:
    """TrainingJobDefinition, or TrainingJobDefinitions with several: as the request gave
    them, or as SageMaker's request would have for a tuning job made through Runyard's
    own API."""
    if spec.training_job_definitions is None:
        one = request.get(DEFINITION)
        definition = spec.definitions[0]
        return {
            DEFINITION: _echoed_definition(one, definition)
            if one
            else _definition(tuning, definition)
        }
    given = {item.get("DefinitionName"): item for item in request.get(DEFINITIONS) or []}
    return {
        DEFINITIONS: [
            _echoed_definition(given[d.name], d) if d.name in given else _definition(tuning, d)
            for d in spec.definitions
        ]
    }


def _warm_start(spec: TuningJobCreate) -> dict[str, Any]:
    """The warm start of a tuning job created through Runyard's own API, as SageMaker's
    request would have given it."""
    config = spec.warm_start_config
    assert config is not None
    return {
        "ParentHyperParameterTuningJobs": [
            {"HyperParameterTuningJobName": name} for name in config.parent_tuning_jobs
        ],
        "WarmStartType": config.warm_start_type,
    }


def summary(tuning: TuningJob, region: str) -> dict[str, Any]:
    """ListHyperParameterTuningJobs' summary of a tuning job."""
    spec = stored(tuning.spec)
    region = region_of(tuning, region)
    return {
        **_summary_members(tuning, spec, region),
        "Strategy": tuning.strategy,
        "ResourceLimits": _limits(spec),
    }


def _summary_members(tuning: TuningJob, spec: TuningJobCreate, region: str) -> dict[str, Any]:
    trials = tuning.trials
    jobs = progress.training_job_counts(trials)
    objectives = progress.objective_counts(trials)
    answer: dict[str, Any] = {
        "HyperParameterTuningJobName": tuning.name,
        "HyperParameterTuningJobArn": arn(tuning, region),
        "HyperParameterTuningJobStatus": tuning.status,
        "CreationTime": tuning.created_at,
        "LastModifiedTime": tuning.updated_at,
        "TrainingJobStatusCounters": {
            "Completed": jobs.completed,
            "InProgress": jobs.in_progress,
            # Runyard retries a trial's job by the job's own rules, not the tuner's.
            "RetryableError": 0,
            "NonRetryableError": jobs.failed,
            "Stopped": jobs.stopped,
        },
        "ObjectiveStatusCounters": {
            "Succeeded": objectives.succeeded,
            "Pending": objectives.pending,
            "Failed": objectives.failed,
        },
    }
    if tuning.ended_at is not None:
        answer["HyperParameterTuningEndTime"] = tuning.ended_at
    return answer


def trial_summary(
    tuning: TuningJob,
    spec: TuningJobCreate,
    trial: TuningTrial,
    region: str,
    times: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A trial as HyperParameterTrainingJobSummary (BestTrainingJob, and the listing of
    a tuning job's training jobs); ``times``: its training job's start and end."""
    answer: dict[str, Any] = {
        "TrainingJobName": trial.name,
        "TrainingJobArn": translate.arn(_Named(trial.name, tuning.project), region),
        "TuningJobName": tuning.name,
        "CreationTime": trial.created_at,
        "TrainingJobStatus": trial.status,
        "TunedHyperParameters": {
            key: wire_value(tuning, key, value, trial.definition)
            for key, value in trial.parameters.items()
        },
        "ObjectiveStatus": trial.objective_status,
    }
    if trial.definition is not None:
        answer["TrainingJobDefinitionName"] = trial.definition
    for member in ("TrainingStartTime", "TrainingEndTime"):
        if times and times.get(member) is not None:
            answer[member] = times[member]
    if trial.failure_reason:
        answer["FailureReason"] = trial.failure_reason
    if trial.objective is not None and math.isfinite(trial.objective):
        objective = spec.definition(trial.definition).objective
        answer["FinalHyperParameterTuningJobObjectiveMetric"] = {
            "Type": objective.type,
            "MetricName": objective.metric_name,
            "Value": trial.objective,
        }
    return answer


class _Named:
    def __init__(self, name: str, project: str) -> None:
        self.name = name
        self.project = project


def _limits(spec: TuningJobCreate) -> dict[str, Any]:
    limits = {
        "MaxNumberOfTrainingJobs": spec.max_trials,
        "MaxParallelTrainingJobs": spec.resource_limits.max_parallel_training_jobs,
    }
    runtime = spec.resource_limits.max_runtime_in_seconds
    if runtime is not None:
        limits["MaxRuntimeInSeconds"] = runtime
    return limits


def _config(spec: TuningJobCreate) -> dict[str, Any]:
    """The configuration of a tuning job created through Runyard's own API, as
    SageMaker's request would have given it (with several definitions, each has its
    objective and ranges)."""
    config: dict[str, Any] = {
        "Strategy": spec.strategy,
        "ResourceLimits": _limits(spec),
        "TrainingJobEarlyStoppingType": spec.early_stopping_type,
        "RandomSeed": spec.random_seed,
        **_strategy_config_of(spec),
    }
    if spec.training_job_definitions is None:
        definition = spec.definitions[0]
        config["HyperParameterTuningJobObjective"] = _wire_objective(definition.objective)
        config["ParameterRanges"] = _wire_ranges(definition.parameter_ranges)
    return config


def _wire_objective(objective: Objective) -> dict[str, Any]:
    return {"Type": objective.type, "MetricName": objective.metric_name}


def _wire_ranges(ranges: ParameterRanges) -> dict[str, Any]:
    return {
        "ContinuousParameterRanges": [
            {
                "Name": item.name,
                "MinValue": str(item.min_value),
                "MaxValue": str(item.max_value),
                "ScalingType": item.scaling_type,
            }
            for item in ranges.continuous
        ],
        "IntegerParameterRanges": [
            {
                "Name": item.name,
                "MinValue": str(item.min_value),
                "MaxValue": str(item.max_value),
                "ScalingType": item.scaling_type,
            }
            for item in ranges.integer
        ],
        "CategoricalParameterRanges": [
            {"Name": item.name, "Values": [hyperparameters.encode(v) for v in item.values]}
            for item in ranges.categorical
        ],
    }


def _strategy_config_of(spec: TuningJobCreate) -> dict[str, Any]:
    if spec.strategy != "Hyperband":
        return {}
    low, high = spec.hyperband_resources
    return {
        "StrategyConfig": {"HyperbandStrategyConfig": {"MinResource": low, "MaxResource": high}}
    }


def _echoed_definition(definition: Mapping[str, Any], of: Definition) -> dict[str, Any]:
    """A training job definition as the request gave it, as SageMaker describes it, with
    what the SDK's ``HyperparameterTuner.attach`` reads: the objective's metric name among
    the static hyperparameters, which SageMaker adds, and the instances as
    ``ResourceConfig`` where the request gave them as
    ``HyperParameterTuningResourceConfig``."""
    metric = of.objective.metric_name
    statics = with_objective(definition.get("StaticHyperParameters") or {}, metric)
    echoed = {**definition, "StaticHyperParameters": statics}
    resources = definition.get(RESOURCES)
    if resources and "ResourceConfig" not in definition:
        echoed["ResourceConfig"] = {
            member: resources[member] for member in _RESOURCE_MEMBERS if member in resources
        }
    return echoed


def _definition(tuning: TuningJob, of: Definition) -> dict[str, Any]:
    """A training job definition of a tuning job created through Runyard's own API; one
    of several names itself and gives its objective and ranges."""
    job = of.training_job
    definition: dict[str, Any] = {
        "StaticHyperParameters": {
            key: hyperparameters.encode(value) for key, value in static_hyperparameters(of).items()
        },
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "MetricDefinitions": [
                {"Name": m.name, "Regex": m.regex} for m in job.metric_definitions
            ],
        },
        "RoleArn": f"arn:aws:iam::{translate.account_id(tuning.project)}:role/{translate.JOB_ROLE}",
        "OutputDataConfig": {"S3OutputPath": job.output_path or ""},
        "ResourceConfig": {
            "InstanceType": job.instance_type,
            "InstanceCount": job.instance_count,
            "VolumeSizeInGB": job.volume_size,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": job.max_run},
    }
    if of.name is not None:
        definition["DefinitionName"] = of.name
        definition["TuningObjective"] = _wire_objective(of.objective)
        definition["HyperParameterRanges"] = _wire_ranges(of.parameter_ranges)
    if job.max_retry_attempts:
        definition["RetryStrategy"] = {"MaximumRetryAttempts": job.max_retry_attempts}
    if job.image_uri:
        definition["AlgorithmSpecification"]["TrainingImage"] = job.image_uri
    return definition
