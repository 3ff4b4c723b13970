"""Request and response bodies of the training-jobs API, one schema per direction.

Field names and limits follow the SageMaker Python SDK estimator and CreateTrainingJob.
Rules that need the server's configuration (instance types, instance-count maximum,
backends) are checked in ``service.training.service``; everything else is checked here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    computed_field,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from contract import (
    codeartifact,
    hyperparameters,
    images,
    limits,
    modes,
    mpi_options,
    sagemaker_flags,
    variables,
)
from contract.layout import IMAGE_BASE_DIR
from contract.spec import Channel as ChannelSpec
from contract.spec import JobSpec
from service.kit import patterns
from service.kit.integers import INT32_MAX, Int32
from service.kit.text import Loc, find_surrogate

NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
MAX_NAME = 63
# The pattern in words, for people: a regular expression in an error helps few of them.
NAME_RULE = (
    "must be 1 to 63 letters, digits and hyphens, starting and ending with a letter or digit"
)
# The OpenAPI schema still shows the pattern, for programs.
NAME_SCHEMA: dict[str, Any] = {"pattern": NAME_PATTERN, "maxLength": MAX_NAME}
_NAME = re.compile(NAME_PATTERN)
_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
_ENV_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

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
MAX_CONTAINER_WORDS = 100
# One word of a container's command, as SageMaker allows them.
ContainerWord = Annotated[str, Field(min_length=1, max_length=256)]


def job_name(value: str) -> str:
    """A job name as SageMaker allows them (``name``, ``base_job_name``, the API's paths)."""
    if len(value) > MAX_NAME or not _NAME.fullmatch(value):
        raise ValueError(NAME_RULE)
    return value


def invalid(title: str, loc: Loc, message: str) -> ValidationError:
    """A validation error at ``loc`` below the model being validated: what a validator
    raises to name a key inside a field, where a ValueError would name only the field."""
    return ValidationError.from_exception_data(
        title, [{"type": PydanticCustomError("value_error", message), "loc": loc, "input": None}]
    )


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _suggest_known_keys(cls, value: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        # pydantic only says that an unknown key is not permitted; a typo deserves the key
        # that was meant ("torch_distribute", "enable").
        try:
            return handler(value)
        except ValidationError as exc:
            errors = exc.errors()
            if not any(_is_unknown_key(error) for error in errors):
                raise
            known = list(cls.model_fields)
            raise ValidationError.from_exception_data(
                exc.title, [_with_known_keys(error, known) for error in errors]
            ) from None


def _is_unknown_key(error: ErrorDetails) -> bool:
    # Only this model's own keys: a nested model has explained its own already.
    return error["type"] == "extra_forbidden" and len(error["loc"]) == 1


def _with_known_keys(error: ErrorDetails, known: list[str]) -> InitErrorDetails:
    message = error["msg"]
    if _is_unknown_key(error):
        close = difflib.get_close_matches(str(error["loc"][0]), known, n=1)
        message = (
            f"unknown key; did you mean {close[0]!r}?"
            if close
            else f"unknown key; the keys are {', '.join(known)}"
        )
    return {
        "type": PydanticCustomError(error["type"], message),
        "loc": error["loc"],
        "input": error["input"],
    }


class _Toggle(Strict):
    enabled: bool = False


class _Distribution(Strict):
    """The estimator's ``distribution`` dict; unknown keys are refused."""

    def as_dict(self) -> dict[str, Any]:
        """As the estimator's dict, the modes not given left out: what the mode records
        (``contract.modes``) and the instances read."""
        return self.model_dump(exclude_none=True)

    def enabled_modes(self) -> list[str]:
        """Dotted names of every enabled mode, e.g. ``["smdistributed.dataparallel"]``."""
        return [mode.name for mode in modes.enabled_modes(self.as_dict())]

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        too_many = modes.too_many(self.as_dict())
        if too_many:
            raise ValueError(
                f"enables {' and '.join(too_many)}; a job runs under exactly one distribution "
                "mode (and, for smdistributed.modelparallel, mpi beside it)"
            )
        return self


def _option_field(option: modes.Option) -> tuple[Any, Any]:
    """One key of a mode's options as a field: its type and its default."""
    if option.kind is dict:
        return dict[str, Any], Field(default_factory=dict)
    kind = option.kind if option.default is not None else option.kind | None
    return kind, Field(default=option.default, ge=option.minimum, le=option.maximum)


def _options_model(mode: modes.Mode) -> type[Strict]:
    """A mode's options: ``enabled``, and whatever else its record says it takes."""
    if mode.takes is None:
        return _Toggle
    keys: dict[str, Any] = {key: _option_field(option) for key, option in mode.takes.keys.items()}
    return create_model(mode.takes.title, __base__=_Toggle, **keys)


def _distribution_keys(under: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of ``distribution`` below the keys ``under``, in the records' order:
    each a mode's options, or a group of modes' (``smdistributed``)."""
    keys: dict[str, Any] = {}
    for mode in modes.MODES:
        path = tuple(mode.name.split("."))
        if len(path) <= len(under) or path[: len(under)] != under:
            continue
        key = path[len(under)]
        if key in keys:  # a group, given by an earlier mode of it
            continue
        if len(path) == len(under) + 1:
            model = _options_model(mode)
        else:
            title = f"{key.capitalize()}Distribution"
            model = create_model(title, __base__=Strict, **_distribution_keys((*under, key)))
        keys[key] = (model | None, None)
    return keys


# Its keys come from the mode records (``contract.modes``), so a mode is added in one
# place; the type checker knows only what every such model does.
if TYPE_CHECKING:
    Distribution = _Distribution
else:
    Distribution = create_model(
        "Distribution",
        __base__=_Distribution,
        __doc__=_Distribution.__doc__,
        **_distribution_keys(),
    )


class Channel(Strict):
    # A prefix (every object under it), or a manifest file listing the objects.
    uri: str = Field(min_length=1, max_length=1024)
    s3_data_type: Literal["S3Prefix", "ManifestFile"] = "S3Prefix"
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = "FullyReplicated"
    input_mode: Literal["File", "Pipe", "FastFile"] = "File"
    content_type: str | None = Field(default=None, max_length=256)
    compression: Literal["None", "Gzip"] = "None"


class Tag(Strict):
    key: str = Field(min_length=1, max_length=128)
    value: str = Field(default="", max_length=256)


class MetricDefinition(Strict):
    """As in the estimator's ``metric_definitions``: the regex's one group is the value."""

    name: str = Field(min_length=1, max_length=255)
    regex: str = Field(min_length=1, max_length=500)

    @field_validator("regex")
    @classmethod
    def _one_group(cls, value: str, info: ValidationInfo) -> str:
        try:
            compiled = patterns.compile_pattern(value)
        except patterns.PatternError as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        if compiled.groups != 1:
            raise ValueError(
                f"must have exactly one capture group (the value), has {compiled.groups}"
            )
        size = patterns.program_size(compiled)
        # A stored job's patterns were taken when it was accepted, under the rules then.
        if size > patterns.MAX_METRIC_PROGRAM and not (info.context or {}).get(_STORED):
            raise ValueError(
                f"too costly to search every line with: its program has {size} instructions, "
                f"at most {patterns.MAX_METRIC_PROGRAM} (counted repetitions nested in one "
                "another, or very large ones)"
            )
        return value


class ProgressMetric(Strict):
    """Which of the job's metrics tells how far training is: its value divided by
    ``total`` is the fraction done (an epoch metric with the epoch count, say)."""

    name: str = Field(min_length=1, max_length=255)
    total: float = Field(default=1.0, gt=0)


class RetryRule(Strict):
    """One rule of ``retry_rules``. A failure matches when its exit code is one of
    ``on_exit_codes`` (when given) and its reason matches one of the regular expressions
    ``on_failure_reasons`` (when given); a rule with neither matches every failure. The
    first rule that matches decides."""

    on_exit_codes: list[Int32] = Field(default_factory=list, max_length=64)
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


class ImageChoice(Strict):
    """The image a job runs on, as the server resolved it at submission: a catalog image's
    name (``builtin`` by default), or an OCI image that runs as a custom container."""

    name: str = Field(default=images.BUILTIN, max_length=255)
    container: str | None = Field(default=None, max_length=255)

    @property
    def label(self) -> str:
        return self.container or self.name


# Validation context of a spec read back from the database (``JobCreate.stored``).
_STORED = "stored"


class JobCreate(Strict):
    name: str | None = Field(default=None, json_schema_extra=NAME_SCHEMA)
    base_job_name: str | None = Field(default=None, json_schema_extra=NAME_SCHEMA)
    # Both, unless a container entry point runs instead (it brings its own code).
    entry_point: str | None = Field(default=None, min_length=1, max_length=256)
    source_uri: str | None = Field(default=None, min_length=1, max_length=1024)
    # SageMaker picks the framework by estimator class; Runyard's one estimator says it.
    framework: Literal["pytorch", "tensorflow"] = "pytorch"
    image_uri: str | None = Field(default=None, max_length=255)
    framework_version: str | None = Field(default=None, max_length=32)
    py_version: str | None = Field(default=None, max_length=16)
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    instance_type: str = Field(min_length=1, max_length=64)
    # The server's maximum is checked with its configuration; this bounds what is read.
    instance_count: int = Field(default=1, ge=1, le=INT32_MAX)
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
    # As SageMaker's ContainerEntrypoint and ContainerArguments: a command each instance
    # runs instead of an entry point, reading /opt/ml itself (the SageMaker SDK v3's
    # ModelTrainer sends one).
    container_entrypoint: list[ContainerWord] | None = Field(
        default=None, min_length=1, max_length=MAX_CONTAINER_WORDS
    )
    container_arguments: list[ContainerWord] | None = Field(
        default=None, min_length=1, max_length=MAX_CONTAINER_WORDS
    )
    # Set by the server at submission, from image_uri or framework, framework_version and
    # py_version; a client names an image with those.
    image: ImageChoice | None = None
    # Whether ``distribution`` was read from the SDK's flags in the hyperparameters: what
    # is wrong with it is then said of them.
    _named_by_flags: bool = PrivateAttr(default=False)

    @property
    def distribution_named_by_flags(self) -> bool:
        return self._named_by_flags

    @classmethod
    def stored(cls, spec: dict[str, Any]) -> Self:
        """A job's spec as it was stored when it was accepted: what it was submitted with
        was read then, and is not read again (a rule added since must not change what
        the job runs)."""
        return cls.model_validate(spec, context={_STORED: True})

    @model_validator(mode="after")
    def _distribution_from_flags(self, info: ValidationInfo) -> Self:
        # As SageMaker's containers do: the SDK (and boto3 users) name the distribution in
        # hyperparameters. Where ``distribution`` is given too, the two must agree.
        if (info.context or {}).get(_STORED):
            return self
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

    def job_spec(self) -> JobSpec:
        """The job as the backends and its instances see it; only a prepared spec (whose
        output_path the server has set) has one."""
        if self.output_path is None:
            raise ValueError("the job is not prepared: its output_path is not set")
        return JobSpec(
            entry_point=self.entry_point or "",
            source_uri=self.source_uri or "",
            instance_type=self.instance_type,
            output_path=self.output_path,
            instance_count=self.instance_count,
            volume_size=self.volume_size,
            framework=self.framework,
            image_uri=self.image_uri,
            hyperparameters=dict(self.hyperparameters),
            distribution=self.distribution.as_dict(),
            inputs={
                name: ChannelSpec(**channel.model_dump()) for name, channel in self.inputs.items()
            },
            environment=dict(self.environment),
            checkpoint_s3_uri=self.checkpoint_s3_uri,
            checkpoint_local_path=self.checkpoint_local_path,
            use_spot_instances=self.use_spot_instances,
            container_entrypoint=tuple(self.container_entrypoint or ()),
            container_arguments=tuple(self.container_arguments or ()),
            image=images.Choice(self.image.name, self.image.container)
            if self.image is not None
            else images.Choice(),
        )

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
    spec: JobCreate

    @computed_field  # type: ignore[prop-decorator]
    @property
    def image(self) -> str:
        """The image its instances run: a catalog image's name, or a custom container's."""
        return self.spec.image.label if self.spec.image is not None else images.BUILTIN


class JobSummary(_FromRow):
    name: str
    project: str
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
                "project": value.project,
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
