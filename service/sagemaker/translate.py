"""CreateTrainingJob's request as Runyard's job spec, and a job as DescribeTrainingJob's
answer.

The SageMaker SDKs say what to run in hyperparameters (``sagemaker_program``,
``sagemaker_submit_directory``, one ``sagemaker_*_enabled`` flag per distribution): the
first two become the spec's entry point and source, and all stay in the hyperparameters,
where SageMaker's containers find them and from which the job's schema reads the
distribution (``contract.sagemaker_flags``), as for a job submitted any other way.

Every member of the request is either honoured, recorded and echoed back (what does not
change what runs: a role, a debugger hook, a KMS key), or refused naming it: an option
that would change what runs and that Runyard cannot honour is never dropped in silence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import ValidationError
from sqlalchemy import Row

from contract import hyperparameters, images, sagemaker_flags
from contract.layout import DEFAULT_TENSORBOARD_PATH
from service.auth.access import Principal
from service.jobs import billing, environment, lookup
from service.jobs.models import TrainingJob
from service.jobs.record import JobRecord
from service.jobs.schemas import JobCreate
from service.jobs.states import Secondary
from service.sagemaker.errors import validation

# Members recorded and echoed by DescribeTrainingJob, changing nothing that runs.
RECORDED = (
    "RoleArn",
    "VpcConfig",
    "EnableInterContainerTrafficEncryption",
    "DebugHookConfig",
    "DebugRuleConfigurations",
    "ProfilerConfig",
    "ProfilerRuleConfigurations",
    "ExperimentConfig",
    "InfraCheckConfig",
)
# Members that would change what runs, which Runyard cannot do: refused, with why.
_REFUSED = {
    "RemoteDebugConfig": "remote debugging is not supported",
    "SessionChainingConfig": "session chaining is not supported",
    "ServerlessJobConfig": "serverless jobs are not supported",
    "MlflowConfig": "MLflow tracking is not supported",
    "ModelPackageConfig": "model packages are not supported",
}
_REFUSED_ALGORITHM = {
    "AlgorithmName": "marketplace algorithms are not supported; give a TrainingImage",
    "TrainingImageConfig": "private registry settings are not supported",
}
_REFUSED_RESOURCES = {
    "InstanceGroups": "heterogeneous instance groups are not supported",
    "TrainingPlanArn": "training plans are not supported",
    "InstancePlacementConfig": "instance placement is not supported",
}
_RECORDED_RESOURCES = ("VolumeKmsKeyId", "KeepAlivePeriodInSeconds")
_CHANNEL_REFUSED = {
    "ShuffleConfig": "shuffling is not supported",
    "RecordWrapperType": "RecordIO wrapping is not supported",
}
_S3_SOURCE_REFUSED = {
    "AttributeNames": "augmented manifest attributes are not supported",
    "InstanceGroupNames": "instance groups are not supported",
    "ModelAccessConfig": "model access configuration is not supported",
    "HubAccessConfig": "hub access is not supported",
}

# The SDK's hyperparameters that say what to run.
PROGRAM = "sagemaker_program"
SUBMIT_DIRECTORY = "sagemaker_submit_directory"
# What a job's describe answer says the SDK set, where it was not the SDK that submitted it.
LOG_LEVEL = 20  # logging.INFO, the SDK's default
JOB_ROLE = "RunyardJob"
# SageMaker's default secondary statuses differ from Runyard's in one name.
_SECONDARY = {"LaunchingInstances": "LaunchingMLInstances", "": "Starting"}


def job_spec(request: Mapping[str, Any], catalog: images.Catalog) -> JobCreate:
    """The Runyard spec of a CreateTrainingJob request (already checked against the
    service model). Its TrainingImage is the job's image_uri, which the server's image
    ``catalog`` reads (an AWS Deep Learning Container's name for its framework and
    version); any other image runs as a custom container."""
    _refuse_members(request, _REFUSED, "")
    for member in ("AlgorithmSpecification", "ResourceConfig"):
        if member not in request:
            raise validation(f"{member}: required for a training job")
    algorithm = request["AlgorithmSpecification"]
    _refuse_members(algorithm, _REFUSED_ALGORITHM, "AlgorithmSpecification.")
    entrypoint = algorithm.get("ContainerEntrypoint")
    if algorithm.get("ContainerArguments") and not entrypoint:
        raise validation(
            "AlgorithmSpecification.ContainerArguments: Runyard's runtime takes no arguments "
            "of its own; give a ContainerEntrypoint to run them with"
        )
    resources = request["ResourceConfig"]
    _refuse_members(resources, _REFUSED_RESOURCES, "ResourceConfig.")
    if "InstanceType" not in resources or "InstanceCount" not in resources:
        raise validation("ResourceConfig: InstanceType and InstanceCount are required")
    values = hyperparameters.decode(request.get("HyperParameters") or {})
    image = algorithm.get("TrainingImage") or None
    dlc = images.parse_dlc(image) if image else None
    program, source = values.get(PROGRAM), values.get(SUBMIT_DIRECTORY)
    if entrypoint:  # it brings its own code, in a channel (the SDK v3's ModelTrainer)
        program = source = None
    elif image is not None and _is_container(image, catalog):
        # A container of the job's own image brings its own program; a script the SDK
        # names is run by the toolkit inside it, as on SageMaker.
        program = program if isinstance(program, str) else None
        source = source if isinstance(source, str) else None
    elif not isinstance(program, str) or not isinstance(source, str):
        raise validation(
            f"HyperParameters: {PROGRAM} and {SUBMIT_DIRECTORY} must name the script and "
            "its source (an s3:// or file:// URI of a tar.gz or directory, or a file of a "
            "channel: /opt/ml/input/data/code/sourcedir.tar.gz), as the SageMaker SDK's "
            "estimators send them, unless AlgorithmSpecification has a ContainerEntrypoint "
            "or a TrainingImage of the job's own"
        )
    stopping = request.get("StoppingCondition") or {}
    if "MaxPendingTimeInSeconds" in stopping:
        raise validation("StoppingCondition.MaxPendingTimeInSeconds is not supported")
    output = request["OutputDataConfig"]
    compression = output.get("CompressionType", "GZIP")
    if compression not in ("GZIP", "NONE"):
        raise validation(f"OutputDataConfig.CompressionType: GZIP or NONE, not {compression!r}")
    checkpoint = request.get("CheckpointConfig") or {}
    tensorboard = request.get("TensorBoardOutputConfig") or {}
    fields: dict[str, Any] = {
        "name": request["TrainingJobName"],
        "entry_point": program,
        "source_uri": source,
        "framework": dlc[0] if dlc else "pytorch",
        "image_uri": image,
        "hyperparameters": values,
        "instance_type": resources["InstanceType"],
        "instance_count": resources["InstanceCount"],
        "volume_size": resources.get("VolumeSizeInGB", 30),
        "inputs": _inputs(request.get("InputDataConfig") or [], algorithm),
        "output_path": output.get("S3OutputPath"),
        "output_compression": compression,
        "max_run": stopping.get("MaxRuntimeInSeconds", 24 * 3600),
        "max_wait": stopping.get("MaxWaitTimeInSeconds"),
        "environment": dict(request.get("Environment") or {}),
        "tags": [{"key": t["Key"], "value": t.get("Value", "")} for t in request.get("Tags") or []],
        "metric_definitions": [
            {"name": m["Name"], "regex": m["Regex"]}
            for m in algorithm.get("MetricDefinitions") or []
        ],
        "checkpoint_s3_uri": checkpoint.get("S3Uri"),
        "checkpoint_local_path": checkpoint.get("LocalPath"),
        "tensorboard_s3_output_path": tensorboard.get("S3OutputPath"),
        "tensorboard_local_path": tensorboard.get("LocalPath"),
        "use_spot_instances": bool(request.get("EnableManagedSpotTraining")),
        "max_retry_attempts": (request.get("RetryStrategy") or {}).get("MaximumRetryAttempts", 0),
        "container_entrypoint": entrypoint or None,
        "container_arguments": algorithm.get("ContainerArguments") or None,
        "enable_network_isolation": bool(request.get("EnableNetworkIsolation")),
    }
    try:
        return JobCreate.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise validation(_spec_problems(exc)) from None


def _is_container(image: str, catalog: images.Catalog) -> bool:
    try:
        return (
            catalog.choose(
                framework="pytorch", framework_version=None, py_version=None, image_uri=image
            ).container
            is not None
        )
    except images.ImageError:
        return False  # refused, naming TrainingImage, once the spec is checked


def _inputs(channels: list[dict[str, Any]], algorithm: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    default_mode = algorithm.get("TrainingInputMode", "File")
    for index, channel in enumerate(channels):
        where = f"InputDataConfig.{index + 1}"
        name = channel["ChannelName"]
        if name in found:
            raise validation(f"{where}.ChannelName: channel {name!r} is given twice")
        _refuse_members(channel, _CHANNEL_REFUSED, f"{where}.")
        source = channel["DataSource"]
        s3 = source.get("S3DataSource")
        if s3 is None:
            raise validation(
                f"{where}.DataSource: only S3DataSource is supported (an s3:// or file:// URI)"
            )
        _refuse_members(s3, _S3_SOURCE_REFUSED, f"{where}.DataSource.S3DataSource.")
        if s3["S3DataType"] not in ("S3Prefix", "ManifestFile"):
            raise validation(
                f"{where}.DataSource.S3DataSource.S3DataType: {s3['S3DataType']} is not "
                "supported (S3Prefix or ManifestFile)"
            )
        found[name] = {
            "uri": s3["S3Uri"],
            "s3_data_type": s3["S3DataType"],
            "distribution": s3.get("S3DataDistributionType", "FullyReplicated"),
            "input_mode": channel.get("InputMode", default_mode),
            "content_type": channel.get("ContentType"),
            "compression": channel.get("CompressionType", "None"),
        }
        found[name] = {k: v for k, v in found[name].items() if v is not None}
    return found


def _refuse_members(given: Mapping[str, Any], refused: Mapping[str, str], path: str) -> None:
    for member, why in refused.items():
        if given.get(member) not in (None, {}, [], False):
            raise validation(f"{path}{member}: {why}")


def _spec_problems(exc: ValidationError) -> str:
    # Runyard's own rules, each named by the member of the request it concerns.
    return "; ".join(
        f"{member_of(tuple(error['loc']))}: {error['msg']}" for error in exc.errors()[:5]
    )


# Where each field of Runyard's spec comes from in CreateTrainingJob's request.
_MEMBER_OF_FIELD = {
    "name": "TrainingJobName",
    "entry_point": f"HyperParameters.{PROGRAM}",
    "source_uri": f"HyperParameters.{SUBMIT_DIRECTORY}",
    "framework_version": "AlgorithmSpecification.TrainingImage",
    "image_uri": "AlgorithmSpecification.TrainingImage",
    "hyperparameters": "HyperParameters",
    "instance_type": "ResourceConfig.InstanceType",
    "instance_count": "ResourceConfig.InstanceCount",
    "volume_size": "ResourceConfig.VolumeSizeInGB",
    "inputs": "InputDataConfig",
    "output_path": "OutputDataConfig.S3OutputPath",
    "output_compression": "OutputDataConfig.CompressionType",
    "max_run": "StoppingCondition.MaxRuntimeInSeconds",
    "max_wait": "StoppingCondition.MaxWaitTimeInSeconds",
    "environment": "Environment",
    "tags": "Tags",
    "metric_definitions": "AlgorithmSpecification.MetricDefinitions",
    "checkpoint_s3_uri": "CheckpointConfig.S3Uri",
    "checkpoint_local_path": "CheckpointConfig.LocalPath",
    "tensorboard_s3_output_path": "TensorBoardOutputConfig.S3OutputPath",
    "tensorboard_local_path": "TensorBoardOutputConfig.LocalPath",
    "use_spot_instances": "EnableManagedSpotTraining",
    "max_retry_attempts": "RetryStrategy.MaximumRetryAttempts",
    "container_entrypoint": "AlgorithmSpecification.ContainerEntrypoint",
    "container_arguments": "AlgorithmSpecification.ContainerArguments",
    "enable_network_isolation": "EnableNetworkIsolation",
}


def member_of(loc: tuple[str | int, ...]) -> str:
    """The request member a spec location (``("inputs", "train", "uri")``) came from."""
    if not loc:
        return "request"
    head, rest = str(loc[0]), [str(part) for part in loc[1:]]
    if head == "inputs" and rest:
        return f"InputDataConfig (channel {rest[0]!r})"
    if head == "distribution":  # read from the flags the SDK wrote
        flag = sagemaker_flags.hyperparameter_at(tuple(rest))
        return f"HyperParameters.{flag}" if flag else "HyperParameters"
    member = _MEMBER_OF_FIELD.get(head, head)
    if head in ("hyperparameters", "environment") and rest:
        return f"{member}.{'.'.join(rest)}"
    return member


# -- the other direction ------------------------------------------------------------------


class Named(Protocol):
    """A job, or a row of its columns, that an ARN names."""

    @property
    def name(self) -> str: ...
    @property
    def project(self) -> str: ...


def arn(job: Named, region: str) -> str:
    return f"arn:aws:sagemaker:{region}:{account_id(job.project)}:training-job/{job.name}"


def account_id(project: str) -> str:
    """A stable 12-digit account number per project, where AWS puts the account."""
    digest = hashlib.sha256(f"runyard-project:{project}".encode()).hexdigest()
    return f"{int(digest, 16) % 10**12:012d}"


def secondary_status(job: TrainingJob | Row[Any]) -> str:
    return _SECONDARY.get(job.secondary_status, job.secondary_status)


def described(job: TrainingJob, region: str, caller: Principal) -> dict[str, Any]:
    """DescribeTrainingJob's answer for ``job``: what Runyard knows, in SageMaker's words,
    with the members of the request that Runyard records echoed back; its environment as
    ``caller`` may read it (``service.jobs.environment``)."""
    spec = job.record
    request, region = _recorded(job, region)
    algorithm = dict(request.get("AlgorithmSpecification") or {})
    # A job submitted through Runyard's own API runs the image the server chose.
    algorithm.setdefault("TrainingImage", spec.image_uri or spec.image.label)
    algorithm.setdefault("TrainingInputMode", "File")
    if spec.metric_definitions:
        algorithm.setdefault(
            "MetricDefinitions",
            [{"Name": m.name, "Regex": m.regex} for m in spec.metric_definitions],
        )
    resources = dict(request.get("ResourceConfig") or {})
    resources.update(
        InstanceType=spec.instance_type,
        InstanceCount=spec.instance_count,
        VolumeSizeInGB=spec.volume_size,
    )
    stopping = {"MaxRuntimeInSeconds": spec.max_run}
    if spec.max_wait is not None:
        stopping["MaxWaitTimeInSeconds"] = spec.max_wait
    answer: dict[str, Any] = {
        **column_members(job),
        "TrainingJobArn": arn(job, region),
        "ModelArtifacts": {"S3ModelArtifacts": job.model_artifacts or lookup.model_uri(job)},
        "HyperParameters": request.get("HyperParameters") or _hyperparameters(job, region),
        "AlgorithmSpecification": algorithm,
        "InputDataConfig": request.get("InputDataConfig") or _channels(spec),
        # SageMaker answers with a KmsKeyId always, empty when none was given; the SDK's
        # Estimator.attach reads it.
        "OutputDataConfig": {
            "KmsKeyId": "",
            **(request.get("OutputDataConfig") or {"S3OutputPath": spec.output_path}),
        },
        "ResourceConfig": resources,
        "StoppingCondition": stopping,
        "SecondaryStatusTransitions": _transitions(job),
        "FinalMetricDataList": final_metrics(job),
        "EnableManagedSpotTraining": spec.use_spot_instances,
        "EnableNetworkIsolation": spec.enable_network_isolation,
        "Environment": environment.shown_to(caller, job),
        "RetryStrategy": {"MaximumRetryAttempts": spec.max_retry_attempts},
    }
    if not answer["InputDataConfig"]:
        del answer["InputDataConfig"]
    if spec.checkpoint_s3_uri:
        answer["CheckpointConfig"] = {"S3Uri": spec.checkpoint_s3_uri}
        if spec.checkpoint_local_path:
            answer["CheckpointConfig"]["LocalPath"] = spec.checkpoint_local_path
    if spec.tensorboard_s3_output_path:
        answer["TensorBoardOutputConfig"] = {
            "S3OutputPath": spec.tensorboard_s3_output_path,
            "LocalPath": spec.tensorboard_local_path or DEFAULT_TENSORBOARD_PATH,
        }
    for member in RECORDED:
        if member in request:
            answer[member] = request[member]
    # The SDK's Estimator.attach reads a role, whoever submitted the job.
    answer.setdefault("RoleArn", role_arn(job))
    if not answer["RetryStrategy"]["MaximumRetryAttempts"]:
        del answer["RetryStrategy"]
    return answer


# The members of DescribeTrainingJob's answer that ``column_members`` gives.
COLUMN_MEMBERS = frozenset(
    {
        "TrainingJobName",
        "TrainingJobStatus",
        "SecondaryStatus",
        "CreationTime",
        "LastModifiedTime",
        "FailureReason",
        "TrainingStartTime",
        "TrainingEndTime",
        "TrainingTimeInSeconds",
        "BillableTimeInSeconds",
    }
)
# The columns they are read from.
MEMBER_COLUMNS = (
    TrainingJob.name,
    TrainingJob.status,
    TrainingJob.secondary_status,
    TrainingJob.created_at,
    TrainingJob.updated_at,
    TrainingJob.failure_reason,
    TrainingJob.training_start_time,
    TrainingJob.training_end_time,
    TrainingJob.billable_seconds,
)


def column_members(job: TrainingJob) -> dict[str, Any]:
    """The members of the job's describe answer that its columns hold (MEMBER_COLUMNS),
    without its record."""
    answer: dict[str, Any] = {
        "TrainingJobName": job.name,
        "TrainingJobStatus": job.status,
        "SecondaryStatus": secondary_status(job),
        "CreationTime": job.created_at,
        "LastModifiedTime": job.updated_at,
    }
    if job.failure_reason:
        answer["FailureReason"] = job.failure_reason
    if job.training_start_time:
        answer["TrainingStartTime"] = job.training_start_time
    if job.training_end_time:
        answer["TrainingEndTime"] = job.training_end_time
    if job.training_start_time and job.training_end_time:
        answer["TrainingTimeInSeconds"] = billing.training_seconds(
            job.training_start_time, job.training_end_time
        )
    if job.billable_seconds is not None:
        answer["BillableTimeInSeconds"] = job.billable_seconds
    return answer


def final_metrics(job: TrainingJob) -> list[dict[str, Any]]:
    """FinalMetricDataList, from the job's final metrics (loaded with it)."""
    return [
        {"MetricName": m.name, "Value": m.value, "Timestamp": m.time} for m in job.final_metrics
    ]


def role_arn(job: TrainingJob) -> str:
    """The role a job submitted without one shows: its project's, in the account number
    its ARN names (Runyard's projects and roles decide what it may do, not IAM)."""
    return f"arn:aws:iam::{account_id(job.project)}:role/{JOB_ROLE}"


def _hyperparameters(job: TrainingJob, region: str) -> dict[str, str]:
    """A job submitted through Runyard's API, in the hyperparameters the SDK would have
    sent for it: its own, and the ``sagemaker_*`` ones that say what runs, from which the
    SDK's framework estimators (``PyTorch.attach``) rebuild it."""
    spec = job.record
    values: dict[str, Any] = dict(spec.hyperparameters)
    framework: dict[str, Any] = {
        **sagemaker_flags.flags(spec.distribution.as_dict()),
        "sagemaker_container_log_level": LOG_LEVEL,
        "sagemaker_job_name": job.name,
        "sagemaker_region": region,
    }
    if spec.entry_point:
        framework[PROGRAM] = spec.entry_point
        framework[SUBMIT_DIRECTORY] = spec.source_uri
    values = {**framework, **values}  # the job's own win
    return {key: hyperparameters.encode(value) for key, value in values.items()}


# The region a job was created in over this protocol (see ``recording``), read by the
# database out of what it recorded; NULL for a job submitted through Runyard's own API.
RECORDED_REGION = TrainingJob.sagemaker_request["region"].as_string()


def summary(row: Row[Any], region: str) -> dict[str, Any]:
    """ListTrainingJobs' summary of a job, from a row of its columns and its
    ``RECORDED_REGION`` as ``region`` (``region``, the call's, where it has none)."""
    found: dict[str, Any] = {
        "TrainingJobName": row.name,
        "TrainingJobArn": arn(row, row.region or region),
        "CreationTime": row.created_at,
        "LastModifiedTime": row.updated_at,
        "TrainingJobStatus": row.status,
        "SecondaryStatus": secondary_status(row),
    }
    if row.training_end_time:
        found["TrainingEndTime"] = row.training_end_time
    return found


def job_arn(job: TrainingJob, region: str) -> str:
    """The job's ARN: in the region it was created in over this protocol, else ``region``."""
    _request, region = _recorded(job, region)
    return arn(job, region)


def _channels(spec: JobRecord) -> list[dict[str, Any]]:
    channels = []
    for name, channel in spec.inputs.items():
        entry: dict[str, Any] = {
            "ChannelName": name,
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": channel.s3_data_type,
                    "S3Uri": channel.uri,
                    "S3DataDistributionType": channel.distribution,
                }
            },
            "CompressionType": channel.compression,
            "InputMode": channel.input_mode,
        }
        if channel.content_type:
            entry["ContentType"] = channel.content_type
        channels.append(entry)
    return channels


def _transitions(job: TrainingJob) -> list[dict[str, Any]]:
    """SecondaryStatusTransitions; the last launch's message also says what image stands in
    for the one the job named, where one does (the SDK's logs print these messages)."""
    launches = [t for t in job.transitions if t.secondary_status == Secondary.LAUNCHING_INSTANCES]
    noted = launches[-1] if launches and job.launched_image_note else None
    return [
        {
            "Status": _SECONDARY.get(t.secondary_status, t.secondary_status),
            "StartTime": t.start_time,
            **({"EndTime": t.end_time} if t.end_time else {}),
            "StatusMessage": f"{t.message}. {job.launched_image_note}" if t is noted else t.message,
        }
        for t in job.transitions
    ]


def _recorded(job: TrainingJob, region: str) -> tuple[Mapping[str, Any], str]:
    """The request a job was created with over this protocol ({} for one submitted through
    Runyard's API), and the region its ARN names: the one it was created in."""
    kept = job.sagemaker_request or {}
    return kept.get("request") or {}, kept.get("region") or region


def recording(request: Mapping[str, Any], region: str) -> dict[str, Any]:
    """What a job keeps of its CreateTrainingJob request."""
    return {"request": dict(request), "region": region}
