"""Request and response bodies of the training-jobs API, one schema per direction.

Field names and limits follow the SageMaker Python SDK estimator and CreateTrainingJob.
Rules that need the server's configuration (instance types, instance-count maximum,
backends) are checked in ``service.jobs.service``; everything else is checked here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from runtime.modes import DISTRIBUTION_MODES
from service.kit import patterns
from service.kit.text import StorableText, without_nul

NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
_ENV_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Environment names the runtime itself sets; a job may not override them.
_RESERVED_ENV_PREFIXES = ("RUNYARD_",)

MAX_HYPERPARAMETERS = 100
MAX_HYPERPARAMETER_KEY = 256
MAX_HYPERPARAMETER_VALUE = 2500
MAX_CHANNELS = 20
MAX_ENVIRONMENT = 100
MAX_ENVIRONMENT_KEY = 512
MAX_ENVIRONMENT_VALUE = 512
MAX_TAGS = 50
MAX_RUN_LIMIT = 28 * 24 * 3600
MAX_METRIC_DEFINITIONS = 40
MAX_RETRY_ATTEMPTS = 30
MAX_RETRY_RULES = 20
# SageMaker's default checkpoint_local_path; paths under it are rebased onto each
# instance's base directory, so they also mean something on the local backend.
DEFAULT_BASE_DIR = "/opt/ml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Toggle(_Strict):
    enabled: bool = False


class MpiDistribution(_Toggle):
    processes_per_host: int | None = Field(default=None, ge=1, le=64)
    custom_mpi_options: str = ""


class DataParallelDistribution(_Toggle):
    custom_mpi_options: str = ""


class ModelParallelDistribution(_Toggle):
    parameters: dict[str, Any] = Field(default_factory=dict)


class SmdistributedDistribution(_Strict):
    dataparallel: DataParallelDistribution | None = None
    modelparallel: ModelParallelDistribution | None = None


class Distribution(_Strict):
    """The estimator's ``distribution`` dict; unknown keys are refused."""

    torch_distributed: _Toggle | None = None
    pytorchddp: _Toggle | None = None
    mpi: MpiDistribution | None = None
    parameter_server: _Toggle | None = None
    smdistributed: SmdistributedDistribution | None = None
    multi_worker_mirrored_strategy: _Toggle | None = None

    def section(self, mode: str) -> Any:
        """The options of a mode by dotted name (``smdistributed.dataparallel``), or None."""
        section: Any = self
        for part in mode.split("."):
            section = getattr(section, part, None)
        return section

    def enabled_modes(self) -> list[str]:
        """Dotted names of every enabled mode, e.g. ``["smdistributed.dataparallel"]``."""
        return [
            mode
            for mode in DISTRIBUTION_MODES
            if (section := self.section(mode)) is not None and section.enabled
        ]

    @model_validator(mode="after")
    def _one_mode(self) -> Distribution:
        modes = self.enabled_modes()
        if len(modes) > 1:
            raise ValueError(
                f"enables {' and '.join(modes)}; a job runs under exactly one distribution mode"
            )
        return self


class Channel(_Strict):
    # A prefix (every object under it), or a manifest file listing the objects.
    uri: str = Field(min_length=1, max_length=1024)
    s3_data_type: Literal["S3Prefix", "ManifestFile"] = "S3Prefix"
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = "FullyReplicated"
    input_mode: Literal["File", "Pipe", "FastFile"] = "File"
    content_type: str | None = Field(default=None, max_length=256)
    compression: Literal["None", "Gzip"] = "None"


class Tag(_Strict):
    key: str = Field(min_length=1, max_length=128)
    value: str = Field(default="", max_length=256)


class MetricDefinition(_Strict):
    """As in the estimator's ``metric_definitions``: the regex's one group is the value."""

    name: str = Field(min_length=1, max_length=255)
    regex: str = Field(min_length=1, max_length=500)

    @field_validator("regex")
    @classmethod
    def _one_group(cls, value: str) -> str:
        try:
            groups = patterns.compile_pattern(value).groups
        except patterns.PatternError as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        if groups != 1:
            raise ValueError(f"must have exactly one capture group (the value), has {groups}")
        return value


class ProgressMetric(_Strict):
    """Which of the job's metrics tells how far training is: its value divided by
    ``total`` is the fraction done (an epoch metric with the epoch count, say)."""

    name: str = Field(min_length=1, max_length=255)
    total: float = Field(default=1.0, gt=0)


class RetryRule(_Strict):
    """One rule of ``retry_rules``. A failure matches when its exit code is one of
    ``on_exit_codes`` (when given) and its reason matches one of the regular expressions
    ``on_failure_reasons`` (when given); a rule with neither matches every failure. The
    first rule that matches decides."""

    on_exit_codes: list[int] = Field(default_factory=list, max_length=64)
    on_failure_reasons: list[str] = Field(default_factory=list, max_length=16)
    action: Literal["retry", "fail"]

    @field_validator("on_failure_reasons")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for index, pattern in enumerate(value):
            if not pattern or len(pattern) > 256:
                raise ValueError(f"[{index}]: must be 1 to 256 characters")
            try:
                patterns.compile_pattern(pattern)
            except patterns.PatternError as exc:
                raise ValueError(f"[{index}]: not a valid regular expression: {exc}") from exc
        return value


class JobCreate(_Strict):
    name: str | None = Field(default=None, max_length=63, pattern=NAME_PATTERN)
    base_job_name: str | None = Field(default=None, max_length=63, pattern=NAME_PATTERN)
    entry_point: str = Field(min_length=1, max_length=256)
    source_uri: str = Field(min_length=1, max_length=1024)
    # SageMaker picks the framework by estimator class; Runyard's one estimator says it.
    framework: Literal["pytorch", "tensorflow"] = "pytorch"
    image_uri: str | None = Field(default=None, max_length=255)
    framework_version: str | None = Field(default=None, max_length=32)
    py_version: str | None = Field(default=None, max_length=16)
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    instance_type: str = Field(min_length=1, max_length=64)
    instance_count: int = Field(default=1, ge=1)
    volume_size: int = Field(default=30, ge=1, le=16384)
    distribution: Distribution = Field(default_factory=Distribution)
    inputs: dict[str, Channel] = Field(default_factory=dict)
    output_path: str | None = Field(default=None, max_length=1024)
    max_run: int = Field(default=24 * 3600, ge=1, le=MAX_RUN_LIMIT)
    environment: dict[str, str] = Field(default_factory=dict)
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    metric_definitions: list[MetricDefinition] = Field(
        default_factory=list, max_length=MAX_METRIC_DEFINITIONS
    )
    backend: str | None = Field(default=None, max_length=32)
    # Where checkpoints are kept across restarts (s3:// or file://), and where the script
    # writes them on the instance (absolute; SM_CHECKPOINT_DIR).
    checkpoint_s3_uri: str | None = Field(default=None, min_length=1, max_length=1024)
    checkpoint_local_path: str | None = Field(default=None, min_length=1, max_length=1024)
    # Restarts after an application failure that a rule says to retry; infrastructure
    # failures (a lost instance, a spot interruption) are retried apart from these.
    max_retry_attempts: int = Field(default=0, ge=0, le=MAX_RETRY_ATTEMPTS)
    retry_rules: list[RetryRule] = Field(default_factory=list, max_length=MAX_RETRY_RULES)
    use_spot_instances: bool = False
    # With spot: the whole budget in seconds, waiting for capacity included (>= max_run).
    max_wait: int | None = Field(default=None, ge=1, le=2 * MAX_RUN_LIMIT, validate_default=True)
    # Jobs waiting for capacity start in priority order (higher first), then by age.
    priority: int = Field(default=0, ge=-1000, le=1000)
    # The metric from which the job's progress and remaining time are estimated.
    progress_metric: ProgressMetric | None = None

    @field_validator("checkpoint_local_path")
    @classmethod
    def _absolute_checkpoint_path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = PurePosixPath(value)
        if not path.is_absolute() or ".." in path.parts or "\\" in value:
            raise ValueError("must be an absolute path without '..'")
        if path == PurePosixPath(DEFAULT_BASE_DIR) or path == PurePosixPath("/"):
            raise ValueError(f"must be a directory of its own, not {value}")
        return str(path)

    @field_validator("progress_metric")
    @classmethod
    def _progress_metric_is_defined(
        cls, value: ProgressMetric | None, info: ValidationInfo
    ) -> ProgressMetric | None:
        defined = {definition.name for definition in info.data.get("metric_definitions", [])}
        if value is not None and value.name not in defined:
            raise ValueError(f"{value.name[:40]!r} is not one of metric_definitions")
        return value

    @field_validator("max_wait")
    @classmethod
    def _spot_budget(cls, value: int | None, info: ValidationInfo) -> int | None:
        spot, max_run = info.data.get("use_spot_instances"), info.data.get("max_run")
        if value is not None and not spot:
            raise ValueError("only applies with use_spot_instances")
        if spot and value is None:
            raise ValueError(
                "required with use_spot_instances: the seconds the job may take in all, "
                "waiting for spot capacity included (at least max_run)"
            )
        if value is not None and max_run is not None and value < max_run:
            raise ValueError(f"{value} is less than max_run ({max_run}), which it includes")
        return value

    @field_validator("entry_point")
    @classmethod
    def _relative_entry_point(cls, value: str) -> str:
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts or "\\" in value:
            raise ValueError("must be a path relative to the source, without '..'")
        return str(path)

    @field_validator("metric_definitions")
    @classmethod
    def _unique_metric_names(cls, value: list[MetricDefinition]) -> list[MetricDefinition]:
        seen: set[str] = set()
        for definition in value:
            if definition.name in seen:
                raise ValueError(f"metric {definition.name[:40]!r} is defined twice")
            seen.add(definition.name)
        return value

    @field_validator("hyperparameters")
    @classmethod
    def _hyperparameter_limits(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) > MAX_HYPERPARAMETERS:
            raise ValueError(f"at most {MAX_HYPERPARAMETERS} hyperparameters, got {len(value)}")
        for key, item in value.items():
            if not key or len(key) > MAX_HYPERPARAMETER_KEY:
                raise ValueError(f"key {key[:40]!r}: must be 1 to {MAX_HYPERPARAMETER_KEY} chars")
            try:
                encoded = encode_hyperparameter(item)
            except ValueError as exc:  # NaN or infinity: not JSON, so no script could read it
                raise ValueError(f"{key!r}: numbers must be finite") from exc
            if len(encoded) > MAX_HYPERPARAMETER_VALUE:
                raise ValueError(f"{key!r}: value longer than {MAX_HYPERPARAMETER_VALUE} chars")
        return value

    @field_validator("inputs", mode="before")
    @classmethod
    def _channel_shorthand(cls, value: Any) -> Any:
        # ``{"train": "file:///data"}`` is short for ``{"train": {"uri": "file:///data"}}``.
        if isinstance(value, dict):
            return {k: {"uri": v} if isinstance(v, str) else v for k, v in value.items()}
        return value

    @field_validator("inputs")
    @classmethod
    def _channel_limits(cls, value: dict[str, Channel]) -> dict[str, Channel]:
        if len(value) > MAX_CHANNELS:
            raise ValueError(f"at most {MAX_CHANNELS} channels, got {len(value)}")
        for name in value:
            if not _CHANNEL_NAME.match(name):
                raise ValueError(f"channel name {name[:70]!r} must match [A-Za-z0-9.-_]{{1,64}}")
        # A Pipe channel is read from FIFOs named <channel>_<epoch> beside the others.
        pipes = [name for name, channel in value.items() if channel.input_mode == "Pipe"]
        for name in value:
            for pipe in pipes:
                if re.fullmatch(re.escape(pipe) + r"_[0-9]+", name):
                    raise ValueError(
                        f"channel name {name!r} is taken by the FIFOs of Pipe channel {pipe!r}"
                    )
        return value

    @field_validator("environment")
    @classmethod
    def _environment_limits(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENVIRONMENT:
            raise ValueError(f"at most {MAX_ENVIRONMENT} variables, got {len(value)}")
        for key, item in value.items():
            if not _ENV_KEY.match(key) or len(key) > MAX_ENVIRONMENT_KEY:
                raise ValueError(f"key {key[:40]!r} must match [a-zA-Z_][a-zA-Z0-9_]*")
            if key.startswith(_RESERVED_ENV_PREFIXES):
                raise ValueError(f"key {key!r}: names starting with RUNYARD_ are reserved")
            if len(item) > MAX_ENVIRONMENT_VALUE:
                raise ValueError(f"{key!r}: value longer than {MAX_ENVIRONMENT_VALUE} chars")
        return value


def host_names(instance_count: int) -> list[str]:
    """A job's instances are named algo-1 .. algo-N, as on SageMaker."""
    return [f"algo-{index}" for index in range(1, instance_count + 1)]


def encode_hyperparameter(value: Any) -> str:
    """A hyperparameter as it is stored in hyperparameters.json (JSON, like the SageMaker SDK)."""
    return json.dumps(value, allow_nan=False)


def nul_location(value: Any, loc: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """Where in ``value`` a string holds a NUL character (no path, argv or environment
    can carry one), or None."""
    if isinstance(value, str):
        return loc if "\x00" in value else None
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        if isinstance(key, str) and "\x00" in key:
            return (*loc, key)
        found = nul_location(item, (*loc, key))
        if found is not None:
            return found
    return None


class _FromRow(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class TransitionPublic(_FromRow):
    status: str
    secondary_status: str
    start_time: datetime
    end_time: datetime | None
    message: str


class InstancePublic(_FromRow):
    host: str
    phase: str
    exit_code: int | None
    message: str
    reported_at: datetime


class FinalMetricPublic(_FromRow):
    """The latest value of one metric (SageMaker's FinalMetricDataList entry)."""

    name: str
    value: float
    time: datetime


class JobPublic(_FromRow):
    name: str
    id: str
    status: str
    secondary_status: str
    failure_reason: str | None
    model_artifacts: str | None
    backend: str
    created_at: datetime
    updated_at: datetime
    training_start_time: datetime | None
    training_end_time: datetime | None
    ended_at: datetime | None
    billable_seconds: int | None
    spot_savings_percent: float | None
    # Why the job waits, while it does (capacity, instances starting, a back-off).
    pending_reason: str | None
    attempt: int
    restarts: int
    # Including the spot interruptions, which are also counted on their own.
    infrastructure_restarts: int
    interruptions: int
    progress: float | None
    estimated_remaining_seconds: int | None
    transitions: list[TransitionPublic]
    instances: list[InstancePublic]
    final_metrics: list[FinalMetricPublic]
    spec: JobCreate


class JobSummary(_FromRow):
    name: str
    status: str
    secondary_status: str
    instance_type: str
    instance_count: int
    created_at: datetime
    ended_at: datetime | None

    @model_validator(mode="before")
    @classmethod
    def _from_job(cls, value: Any) -> Any:
        # A job row keeps its instance type and count inside its spec.
        spec = getattr(value, "spec", None)
        if isinstance(spec, dict):
            return {
                "name": value.name,
                "status": value.status,
                "secondary_status": value.secondary_status,
                "instance_type": spec["instance_type"],
                "instance_count": spec["instance_count"],
                "created_at": value.created_at,
                "ended_at": value.ended_at,
            }
        return value


class JobsPage(BaseModel):
    items: list[JobSummary]
    next_cursor: str | None


class DryRun(BaseModel):
    """What submitting would create, without creating anything."""

    name: str
    backend: str
    plan: dict[str, Any]
    rendered: str


class InterruptionNotice(_Strict):
    """A spot interruption notice for one instance."""

    message: StorableText = Field(default="spot capacity reclaimed", min_length=1, max_length=512)
    # The attempt of the instance that got the notice: a late notice from an earlier
    # attempt's instance must not interrupt the next one. Absent when a person sends it.
    attempt: int | None = Field(default=None, ge=0)


class InstanceReport(_Strict):
    """Sent by the runtime on an instance when its phase changes."""

    phase: Literal["Downloading", "Training", "Uploading", "Completed", "Failed", "Stopped"]
    time: datetime
    message: StorableText = Field(default="", max_length=4096)
    exit_code: int | None = None
    failure_reason: str | None = None
    model_uri: str | None = Field(default=None, max_length=2048)
    # Which start of the job the instance belongs to; an earlier attempt's report is
    # ignored. Absent from runtimes that predate restarts.
    attempt: int | None = Field(default=None, ge=0)

    @field_validator("failure_reason")
    @classmethod
    def _truncate(cls, value: str | None) -> str | None:
        return None if value is None else without_nul(value[:1024])
