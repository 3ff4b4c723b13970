"""The job as the server keeps it: the ``spec`` column of a ``TrainingJob``, typed.

A request (``service.jobs.schemas.JobCreate``) becomes a record once, when the job is
accepted (``JobCreate.to_record``), with what the server chose for it: its name, backend,
output path, image and the distribution's hyperparameters. Everything after that (the
worker, the SageMaker endpoint, the metrics, the instances' credentials) reads the record,
never the request: a rule added to the request since must not change what a stored job
runs, so ``JobRecord.load`` checks the record's shape and none of the request's rules.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal, Self

from cachetools import LRUCache
from pydantic import ConfigDict, Field

from contract import images
from contract.spec import Channel as ChannelSpec
from contract.spec import JobSpec
from service.jobs.spec_parts import (
    MAX_CONTAINER_WORDS,
    MAX_METRIC_DEFINITIONS,
    MAX_RETRY_ATTEMPTS,
    MAX_RETRY_RULES,
    MAX_RUN_LIMIT,
    MAX_TAGS,
    NAME_SCHEMA,
    STORED,
    Channel,
    ContainerWord,
    Distribution,
    ImageChoice,
    MetricDefinition,
    ProgressMetric,
    RetryRule,
    Strict,
    Tag,
)
from service.kit.integers import INT32_MAX


class JobFields(Strict):
    """The fields of a job's spec, as the SageMaker estimator names them: what the request
    and the record share, with the bounds every stored value is within."""

    # The descriptions are the API's documentation: its OpenAPI schema and, spelled in
    # camelCase, the TrainingJob resource's (`kubectl explain trainingjob.spec`).
    name: str | None = Field(
        default=None,
        json_schema_extra=NAME_SCHEMA,
        description="The job's name, unique in its project: 1 to 63 letters, digits and "
        "hyphens. Empty: made of `base_job_name` (or the entry point) and the time.",
    )
    # Both, unless a container entry point runs instead (it brings its own code).
    entry_point: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="The script each instance runs (`train.py`, `run.sh`), or a directory "
        "holding a package, within the code at `source_uri`. Needed unless "
        "`container_entrypoint` runs instead.",
    )
    source_uri: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="Where the job's code is: a .tar.gz or a directory, at an s3:// or "
        "file:// URI (POST /v1/sources stores a bundle and answers its URI).",
    )
    # SageMaker picks the framework by estimator class; Runyard's one estimator says it.
    framework: Literal["pytorch", "tensorflow", "sklearn"] = Field(
        default="pytorch",
        description="The framework whose image runs the script, as the SageMaker estimator's "
        "class says it.",
    )
    image_uri: str | None = Field(
        default=None,
        max_length=255,
        description="The image to run on: a catalog image's name, or an OCI image run as a "
        "custom container. Empty: chosen by `framework`, `framework_version` and "
        "`py_version`.",
    )
    framework_version: str | None = Field(
        default=None,
        max_length=32,
        description="The framework's version, choosing a catalog image (`2.13`).",
    )
    py_version: str | None = Field(
        default=None, max_length=16, description="Its Python version (`py311`)."
    )
    hyperparameters: dict[str, Any] = Field(
        default_factory=dict,
        description="Given to the script as sorted `--key value` arguments and in SM_HPS "
        "(values that are not strings JSON-encoded); keys beginning `sagemaker_` are the "
        "framework's.",
    )
    instance_type: str = Field(
        min_length=1,
        max_length=64,
        description="What each instance is (`ml.m5.xlarge`, `ml.g5.xlarge`): its CPUs, "
        "memory and accelerators. This server runs those GET /v1/instance-types lists.",
    )
    # The server's maximum is checked with its configuration; this bounds what is read.
    instance_count: int = Field(
        default=1,
        ge=1,
        le=INT32_MAX,
        description="How many instances the job runs on: hosts algo-1 to algo-N.",
    )
    volume_size: int = Field(
        default=30,
        ge=1,
        le=16384,
        description="Each instance's storage, in GiB (a pod's ephemeral storage, an EC2 "
        "instance's root volume).",
    )
    distribution: Distribution = Field(
        default_factory=Distribution,
        description="How the instances train together, as the SageMaker estimator's "
        "`distribution`: one mode, `{enabled: true}` with its options. Empty: the script "
        "runs once on each instance.",
    )
    inputs: dict[str, Channel] = Field(
        default_factory=dict,
        description="The input channels, by name (`train`, `test`): each instance finds a "
        "channel's data under /opt/ml/input/data/<name> (SM_CHANNEL_<NAME>).",
    )
    output_path: str | None = Field(
        default=None,
        max_length=1024,
        description="Where the model and output go (`s3://bucket/prefix`), under the job's "
        "name. Empty: the server's artifact root.",
    )
    output_compression: Literal["GZIP", "NONE"] = Field(
        default="GZIP",
        description="How the model is stored: GZIP, /opt/ml/model packed as "
        "`output/model.tar.gz`; NONE, its files as they are under `output/model/` "
        "(SageMaker's OutputDataConfig.CompressionType, the SDK's "
        "`disable_output_compression`).",
    )
    max_run: int = Field(
        default=24 * 3600,
        ge=1,
        le=MAX_RUN_LIMIT,
        description="The longest the job may train, in seconds; then it is stopped "
        "(MaxRuntimeExceeded).",
    )
    environment: dict[str, str] = Field(
        default_factory=dict, description="Environment variables for the script."
    )
    tags: list[Tag] = Field(
        default_factory=list,
        max_length=MAX_TAGS,
        description="Labels the job is kept and listed with, each `{key, value}`.",
    )
    metric_definitions: list[MetricDefinition] = Field(
        default_factory=list,
        max_length=MAX_METRIC_DEFINITIONS,
        description="Metrics read from the script's log: each a name and a regular "
        "expression whose one group is the value.",
    )
    backend: str | None = Field(
        default=None,
        max_length=32,
        description="The backend that runs the job (`local`, `kubernetes`, `ec2`). Empty: "
        "the one the server sends its instance type to.",
    )
    # Where checkpoints are kept across restarts (s3:// or file://), and where the script
    # writes them on the instance (absolute; SM_CHECKPOINT_DIR).
    checkpoint_s3_uri: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="Where checkpoints are kept across restarts and spot interruptions "
        "(s3:// or file://): copied from the instances while they run, and back before a "
        "restart.",
    )
    checkpoint_local_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="Where the script writes checkpoints on each instance (an absolute "
        "path; SM_CHECKPOINT_DIR). Empty: /opt/ml/checkpoints.",
    )
    # SageMaker's TensorBoardOutputConfig (S3OutputPath, LocalPath).
    tensorboard_s3_output_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="Where the script's TensorBoard data is stored (s3:// or file://), below "
        "`<uri>/<job name>/tensorboard-output`: copied from each instance while it runs and "
        "when it ends (SageMaker's TensorBoardOutputConfig.S3OutputPath).",
    )
    tensorboard_local_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="Where the script writes TensorBoard data on each instance, a directory "
        "below /opt/ml. Empty: /opt/ml/output/tensorboard (SageMaker's "
        "TensorBoardOutputConfig.LocalPath).",
    )
    # Restarts after an application failure that a rule says to retry; infrastructure
    # failures (a lost instance, a spot interruption) are retried apart from these.
    max_retry_attempts: int = Field(
        default=0,
        ge=0,
        le=MAX_RETRY_ATTEMPTS,
        description="How many times the job restarts after a failure of its script that "
        "`retry_rules` retry; a lost instance or a spot interruption is retried apart.",
    )
    retry_rules: list[RetryRule] = Field(
        default_factory=list,
        max_length=MAX_RETRY_RULES,
        description="Which failures are retried: the first rule that matches decides.",
    )
    use_spot_instances: bool = Field(
        default=False,
        description="Run on spot capacity: cheaper, and interrupted when it is taken back "
        "(the job resumes from its checkpoints, within `max_wait`).",
    )
    # With spot: the whole budget in seconds, waiting for capacity included (>= max_run).
    max_wait: int | None = Field(
        default=None,
        ge=1,
        le=2 * MAX_RUN_LIMIT,
        validate_default=True,
        description="With spot instances: the job's whole time in seconds, waiting for "
        "capacity included; at least `max_run`.",
    )
    # Jobs waiting for capacity start in priority order (higher first), then by age.
    priority: int = Field(
        default=0,
        ge=-1000,
        le=1000,
        description="Of the jobs waiting for capacity, those of higher priority start "
        "first, then the older.",
    )
    # The metric from which the job's progress and remaining time are estimated.
    progress_metric: ProgressMetric | None = Field(
        default=None,
        description="The metric the job's progress and remaining time are estimated from.",
    )
    # As SageMaker's ContainerEntrypoint and ContainerArguments: a command each instance
    # runs instead of an entry point, reading /opt/ml itself (the SageMaker SDK v3's
    # ModelTrainer sends one).
    container_entrypoint: list[ContainerWord] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CONTAINER_WORDS,
        description="A command each instance runs instead of an entry point, reading "
        "/opt/ml itself (SageMaker's ContainerEntrypoint).",
    )
    container_arguments: list[ContainerWord] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CONTAINER_WORDS,
        description="The arguments of `container_entrypoint` (SageMaker's ContainerArguments).",
    )
    # As SageMaker's EnableNetworkIsolation: the instances reach each other and nothing
    # else (no egress to the network the machine reaches).
    enable_network_isolation: bool = Field(
        default=False,
        description="The instances reach each other and nothing else (SageMaker's "
        "EnableNetworkIsolation).",
    )
    # Set by the server at submission, from image_uri or framework, framework_version and
    # py_version; a client names an image with those.
    image: ImageChoice | None = Field(
        default=None, description="Set by the server: the image the job runs on."
    )

    def job_spec_at(self, output_path: str) -> JobSpec:
        """The job as the backends and its instances would see it, writing its output
        under ``output_path``: each ``JobSpec`` field is this record's field of the same
        name, taken as it is unless ``_AS_CONTRACT`` says how (a plain field added to both
        needs nothing here)."""
        values = {name: getattr(self, name) for name in _SPEC_FIELDS}
        for name, convert in _AS_CONTRACT.items():
            values[name] = convert(values[name])
        values["output_path"] = output_path
        return JobSpec(**values)


def _image(choice: ImageChoice | None) -> images.Choice:
    if choice is None:
        return images.Choice()
    return images.Choice(choice.name, choice.container, choice.note)


# The record's fields whose contract form is not the record's own value: pydantic models
# become the contract's dataclasses, lists tuples, and an empty entry point or source "".
_AS_CONTRACT: dict[str, Callable[[Any], Any]] = {
    "entry_point": lambda value: value or "",
    "source_uri": lambda value: value or "",
    "hyperparameters": dict,
    "environment": dict,
    "distribution": Distribution.as_dict,
    "inputs": lambda inputs: {
        name: ChannelSpec(**channel.model_dump()) for name, channel in inputs.items()
    },
    "container_entrypoint": lambda words: tuple(words or ()),
    "container_arguments": lambda words: tuple(words or ()),
    "image": _image,
}
_SPEC_FIELDS = tuple(item.name for item in dataclasses.fields(JobSpec))


class JobRecord(JobFields):
    """A job as it was accepted. Unknown keys are ignored, not refused: a field retired
    since must not make an older job unreadable."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    output_path: str
    # A job stored before images were chosen runs the built-in one.
    image: ImageChoice = Field(default_factory=ImageChoice)

    @classmethod
    def load(cls, spec: Mapping[str, Any]) -> Self:
        """The record stored as ``spec`` (a ``TrainingJob.spec``)."""
        return cls.model_validate(spec, context={STORED: True})

    def dump(self) -> dict[str, Any]:
        """As it is stored: JSON, without the fields that are not set."""
        return self.model_dump(mode="json", exclude_none=True)

    def job_spec(self) -> JobSpec:
        """The job as the backends and its instances see it."""
        return self.job_spec_at(self.output_path)


# Records parsed, by job id: jobs read again and again (a log's ingest, the reconciler's
# passes, describe) are parsed once, not at every read (22 us each, more for a large
# spec). Enough for every live job of a large deployment.
_PARSED_JOBS = 4096
_parsed: LRUCache[str, tuple[Mapping[str, Any], JobRecord]] = LRUCache(_PARSED_JOBS)
_parsed_lock = threading.Lock()


def remember(job_id: str, spec: Mapping[str, Any], record: JobRecord) -> None:
    """Keep ``record`` as job ``job_id``'s, stored as ``spec`` (its ``dump``): a job
    accepted just now is read at once (its lifecycle, its capacity, the reply), and
    parsing back what it was dumped from cost as much as the rest of storing it."""
    with _parsed_lock:
        _parsed[job_id] = (spec, record)


def record_of(job_id: str, spec: Mapping[str, Any]) -> JobRecord:
    """The record of job ``job_id`` stored as ``spec``, parsed once for as long as its
    stored form is the same: a record is written once, when its job is accepted, but the
    answer is checked against what was read all the same (a comparison of two dicts,
    a tenth of a parse), so nothing but the same stored form ever gets a kept record.
    The record is frozen, and its lists and dicts are not to be changed in place."""
    with _parsed_lock:
        kept = _parsed.get(job_id)
    if kept is not None and (kept[0] is spec or kept[0] == spec):
        return kept[1]
    record = JobRecord.load(spec)
    with _parsed_lock:
        _parsed[job_id] = (spec, record)
    return record
