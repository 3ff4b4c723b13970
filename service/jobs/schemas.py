"""Request and response bodies of the training-jobs API, one schema per direction.

Field names and limits follow the SageMaker Python SDK estimator and CreateTrainingJob.
Rules that need the server's configuration (instance types, instance-count maximum,
backends) are checked in ``service.training.service``; everything else is checked here.
The request's fields are the record's (``service.jobs.record``); the rules below are
what a new submission must pass, and are not read again once the job is stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    computed_field,
    field_validator,
    model_validator,
)

from contract import (
    codeartifact,
    hyperparameters,
    layout,
    limits,
    mpi_options,
    sagemaker_flags,
    variables,
)
from contract.layout import IMAGE_BASE_DIR
from service.jobs.record import JobFields, JobRecord
from service.jobs.spec_parts import (
    NAME_SCHEMA,
    Channel,
    Distribution,
    ImageChoice,
    MetricDefinition,
    ProgressMetric,
    invalid,
    job_name,
)
from service.kit.text import find_surrogate

_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
_ENV_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

MAX_HYPERPARAMETERS = 100
MAX_HYPERPARAMETER_KEY = 256
MAX_HYPERPARAMETER_VALUE = 2500
MAX_CHANNELS = 20
MAX_ENVIRONMENT = 100
MAX_ENVIRONMENT_KEY = 512
MAX_ENVIRONMENT_VALUE = 512


class JobCreate(JobFields):
    """A job as a client submits it."""

    base_job_name: str | None = Field(
        default=None,
        json_schema_extra=NAME_SCHEMA,
        description="Without a `name`: the job is named `<it>-<time>`.",
    )
    # Whether ``distribution`` was read from the SDK's flags in the hyperparameters: what
    # is wrong with it is then said of them.
    _named_by_flags: bool = PrivateAttr(default=False)

    @property
    def distribution_named_by_flags(self) -> bool:
        return self._named_by_flags

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_as_written(cls, value: Any) -> Any:
        return cls.tags_as_written(value)

    @staticmethod
    def tags_as_written(value: Any) -> Any:
        """Tags as a list of ``{key, value}``, as SageMaker writes them (``[{Key, Value}]``),
        or as a mapping of key to value (``tags: {team: vision}`` in a spec file)."""
        if isinstance(value, dict):
            return [{"key": key, "value": tag} for key, tag in value.items()]
        if isinstance(value, list):
            return [_lowercase_tag(item) for item in value]
        return value

    def to_record(
        self,
        *,
        name: str,
        backend: str,
        output_path: str,
        image: ImageChoice,
        hyperparameters: dict[str, Any],
    ) -> JobRecord:
        """The job as the server keeps it: this request, with what the server chose."""
        fields = self.model_dump(exclude={"base_job_name"})
        return JobRecord.model_validate(
            {
                **fields,
                "name": name,
                "backend": backend,
                "output_path": output_path,
                "image": image.model_dump(),
                "hyperparameters": hyperparameters,
            }
        )

    @model_validator(mode="after")
    def _distribution_from_flags(self) -> Self:
        # As SageMaker's containers do: the SDK (and boto3 users) name the distribution in
        # hyperparameters. Where ``distribution`` is given too, the two must agree.
        named, problems = sagemaker_flags.distribution(self.hyperparameters)
        if problems:
            raise invalid("JobCreate", problems[0].loc, problems[0].message)
        if not named:
            return self
        if self.distribution.enabled_modes():
            differences = sagemaker_flags.disagreements(self.distribution.as_dict(), named)
            if differences:
                raise invalid("JobCreate", ("distribution",), "; ".join(differences))
            return self
        try:
            self.distribution = Distribution.model_validate(named)
            self._named_by_flags = True
        except ValidationError as exc:
            error = exc.errors()[0]
            flag = sagemaker_flags.hyperparameter_at(tuple(error["loc"]))
            where = ("hyperparameters", flag) if flag else ("hyperparameters",)
            raise invalid("JobCreate", where, error["msg"]) from None
        return self

    @model_validator(mode="after")
    def _what_runs(self) -> Self:
        # Whether entry_point and source_uri are needed depends on the image (a custom
        # container brings its own program): the service checks once it has chosen it.
        if self.container_entrypoint is None:
            if self.container_arguments is not None:
                raise invalid("JobCreate", ("container_arguments",), "needs a container_entrypoint")
            if self.entry_point is not None and self.source_uri is None:
                raise invalid("JobCreate", ("source_uri",), "Field required")
        elif self.distribution.enabled_modes():
            raise invalid(
                "JobCreate",
                ("container_entrypoint",),
                "starts its own processes: it goes without a distribution mode",
            )
        return self

    @model_validator(mode="after")
    def _source_in_a_channel(self) -> Self:
        # With network isolation the SageMaker SDK ships the code as a channel and names
        # it by its path on the instance: every instance must find it there as a file.
        found = layout.channel_file(self.source_uri) if self.source_uri else None
        if found is None:
            return self
        channel = self.inputs.get(found.channel)
        why = None
        if channel is None:
            why = f"names channel {found.channel!r}, which is not one of the job's inputs"
        elif channel.input_mode == "Pipe":
            why = f"is in channel {found.channel!r}, whose Pipe input mode leaves no file there"
        elif channel.distribution != "FullyReplicated":
            why = (
                f"is in channel {found.channel!r}, which every instance needs whole: its "
                "distribution must be FullyReplicated"
            )
        if why is not None:
            raise invalid("JobCreate", ("source_uri",), why)
        return self

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        # Before the fields: pydantic would store a surrogate in a key as U+FFFD, and pass
        # one in a value on to the database, which cannot store it.
        found = find_surrogate(value)
        if found is None:
            return value
        what = "value" if found.key is None else f"key {found.key[:40]!r}"
        raise invalid(
            cls.__name__, found.loc, f"{what} must be valid Unicode, without unpaired surrogates"
        )

    @field_validator("name", "base_job_name")
    @classmethod
    def _name_rule(cls, value: str | None) -> str | None:
        return None if value is None else job_name(value)

    @field_validator("checkpoint_local_path")
    @classmethod
    def _absolute_checkpoint_path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = PurePosixPath(value)
        if not path.is_absolute() or ".." in path.parts or "\\" in value:
            raise ValueError("must be an absolute path without '..'")
        # The instance's base directory itself: checkpoints need a directory of their own
        # (a path under it means the same place below each instance's base directory).
        if path == PurePosixPath(IMAGE_BASE_DIR) or path == PurePosixPath("/"):
            raise ValueError(f"must be a directory of its own, not {value}")
        return str(path)

    @field_validator("tensorboard_local_path")
    @classmethod
    def _tensorboard_path_is_the_jobs(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if (why := layout.tensorboard_path_problem(value)) is not None:
            raise ValueError(why)
        # Declared before this field: absent from info.data only where it was refused.
        if info.data.get("tensorboard_s3_output_path", "") is None:
            raise ValueError("needs tensorboard_s3_output_path, where its data is stored")
        return value

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

    @field_validator("source_uri")
    @classmethod
    def _source_form(cls, value: str | None) -> str | None:
        if value is None or not layout.is_path(value) or layout.channel_file(value):
            return value
        raise ValueError(
            f"a path must name a file in one of the job's channels ({layout.CHANNELS_DIR}/"
            "<channel>/..., as the SageMaker SDK names its code with network isolation); "
            "give stored code as an s3:// or file:// URI"
        )

    @field_validator("entry_point")
    @classmethod
    def _relative_entry_point(cls, value: str | None) -> str | None:
        if value is None:
            return None
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

    @field_validator("hyperparameters", "environment")
    @classmethod
    def _map_limits(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        _MAP_LIMITS[str(info.field_name)].check(value)
        return value

    @field_validator("environment")
    @classmethod
    def _codeartifact_repository(cls, value: dict[str, str]) -> dict[str, str]:
        # The job's credentials may read the repository it names: a repository's ARN, not
        # a pattern.
        arn = value.get(codeartifact.REPOSITORY_ARN)
        if arn is not None and codeartifact.parse(arn) is None:
            raise invalid(
                "JobCreate",
                (codeartifact.REPOSITORY_ARN,),
                "must be a CodeArtifact repository's ARN "
                "(arn:aws:codeartifact:<region>:<account>:repository/<domain>/<repository>)",
            )
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


@dataclass(frozen=True)
class _MapLimits:
    """SageMaker's limits on a map (hyperparameters, environment): how many entries, which
    keys, and how long each value may be once it is text."""

    noun: str
    most: int
    key_problem: Callable[[str], str | None]
    text: Callable[[str, Any], str]
    longest: int

    def check(self, value: dict[str, Any]) -> None:
        if len(value) > self.most:
            raise ValueError(f"at most {self.most} {self.noun}, got {len(value)}")
        for key, item in value.items():
            problem = self.key_problem(key)
            if problem is not None:
                raise ValueError(problem)
            if len(self.text(key, item)) > self.longest:
                raise ValueError(f"{key!r}: value longer than {self.longest} chars")


def _hyperparameter_key_problem(key: str) -> str | None:
    if not key or len(key) > MAX_HYPERPARAMETER_KEY:
        return f"key {key[:40]!r}: must be 1 to {MAX_HYPERPARAMETER_KEY} chars"
    return None


def _encoded_hyperparameter(key: str, value: Any) -> str:
    try:
        return hyperparameters.encode(value)
    except ValueError as exc:  # NaN or infinity: not JSON, so no script could read it
        raise ValueError(f"{key!r}: numbers must be finite") from exc


def _environment_key_problem(key: str) -> str | None:
    if not _ENV_KEY.match(key) or len(key) > MAX_ENVIRONMENT_KEY:
        return f"key {key[:40]!r} must match [a-zA-Z_][a-zA-Z0-9_]*"
    # Names the runtime itself sets: a job may not override them.
    if key.startswith(variables.RESERVED_PREFIX):
        return f"key {key!r}: names starting with {variables.RESERVED_PREFIX} are reserved"
    # Under mpirun the job's environment reaches each rank's Open MPI library (never
    # mpirun's own): held to what custom_mpi_options may set, so a job tunes Open MPI's
    # communication only in the ways the API allows there.
    if (problem := mpi_options.open_mpi_variable_problem(key)) is not None:
        return f"key {key!r}: {problem}"
    return None


_MAP_LIMITS = {
    "hyperparameters": _MapLimits(
        "hyperparameters",
        MAX_HYPERPARAMETERS,
        _hyperparameter_key_problem,
        _encoded_hyperparameter,
        MAX_HYPERPARAMETER_VALUE,
    ),
    "environment": _MapLimits(
        "variables",
        MAX_ENVIRONMENT,
        _environment_key_problem,
        lambda _key, item: str(item),
        MAX_ENVIRONMENT_VALUE,
    ),
}


def hyperparameters_too_large(values: dict[str, Any]) -> str | None:
    """Why ``values`` cannot reach the script, or None. Each passes the limits on its own,
    but together they go into single variables of the script's environment (SM_HPS,
    SM_USER_ARGS, SM_TRAINING_ENV), and Linux refuses to start a program with a longer
    one; checked when a job is submitted, not each time a stored spec is read."""
    size = limits.hyperparameter_bytes(values)
    if size <= limits.MAX_HYPERPARAMETER_BYTES:
        return None
    return (
        f"together they take {size} bytes of the script's environment, over the "
        f"{limits.MAX_HYPERPARAMETER_BYTES} that fit: SM_HPS, SM_USER_ARGS and "
        f"SM_TRAINING_ENV each carry them all as JSON, and Linux allows one variable "
        f"{limits.MAX_ARG_STRLEN} bytes, some of SM_TRAINING_ENV's for the rest of the job"
    )


def spec_nul_location(spec: BaseModel) -> tuple[str | int, ...] | None:
    """Where in ``spec`` a string holds a NUL character, or None. Its JSON text (written
    by pydantic's core, which escapes a NUL as ``\\u0000``) is searched first, and walked
    only when it has one: the walk of every spec took a tenth of preparing a job."""
    if "\\u0000" not in spec.model_dump_json():
        return None
    return nul_location(spec.model_dump(mode="json"))


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
    project: str
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
    # What keeps the instances apart: "namespaces" (each a host of its own on the server's
    # machine), "shared" (they share it), "machine" (pods, EC2 instances); None until launch.
    isolation: str | None
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
    spec: JobRecord

    # As the backend launched the instances (service.jobs.models); shown through the
    # image fields below.
    launched_image: str | None = Field(default=None, exclude=True)
    launched_image_note: str | None = Field(default=None, exclude=True)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def image(self) -> str:
        """The image its instances run: a catalog image's name, or a custom container's;
        once they are launched, the one they were launched on."""
        return self.launched_image or self.spec.image.label

    @computed_field  # type: ignore[prop-decorator]
    @property
    def image_requested(self) -> str | None:
        """What the job's fields named its image by, when they named one."""
        spec = self.spec
        if spec.image_uri is not None:
            return spec.image_uri
        if spec.framework_version is None:
            return None
        python = f" ({spec.py_version})" if spec.py_version else ""
        return f"{spec.framework} {spec.framework_version}{python}"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def image_note(self) -> str | None:
        """How the image differs from what the fields named, and why; None where it does
        not."""
        notes = [note for note in (self.spec.image.note, self.launched_image_note) if note]
        return "; ".join(notes) or None


class JobSummary(_FromRow):
    name: str
    project: str
    status: str
    secondary_status: str
    instance_type: str
    instance_count: int
    created_at: datetime
    ended_at: datetime | None


class JobsPage(BaseModel):
    items: list[JobSummary]
    next_cursor: str | None


class DryRun(BaseModel):
    """What submitting would create, without creating anything: the job as the server
    would store it (``spec``: the request with every default filled and the image chosen,
    as a job's ``spec`` reads once created; credentials in its environment masked), its
    hosts, and the backend's plan for them (``plan``, ``rendered``)."""

    name: str
    backend: str
    hosts: list[str]
    spec: JobRecord
    plan: dict[str, Any]
    rendered: str


class JobDeleted(BaseModel):
    """What deleting an ended job removed."""

    name: str
    # "kept": its artifacts are where they were; "removed": every object under
    # ``<output_path>/<name>/`` is gone.
    artifacts: Literal["kept", "removed"]
    removed_objects: int


def _lowercase_tag(item: Any) -> Any:
    """SageMaker's ``{"Key": ..., "Value": ...}`` as Runyard's ``{"key", "value"}``; a tag
    that mixes both spellings is left for validation to refuse."""
    if isinstance(item, dict) and item.keys() <= {"Key", "Value"}:
        return {name.lower(): part for name, part in item.items()}
    return item
