"""The parts a job's spec is made of (channels, tags, metric definitions, retry rules, the
distribution, the image), shared by the request that submits a job
(``service.jobs.schemas``) and the record the server keeps of it (``service.jobs.record``).

What a part checks of itself holds wherever it is read; rules that only a new submission
must pass live in the request.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from contract import images, modes
from contract.failure_causes import FailureCause
from service.kit import patterns
from service.kit.integers import Int32
from service.kit.text import Loc

NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
MAX_NAME = 63
# The pattern in words, for people: a regular expression in an error helps few of them.
NAME_RULE = (
    "must be 1 to 63 letters, digits and hyphens, starting and ending with a letter or digit"
)
# The OpenAPI schema still shows the pattern, for programs.
NAME_SCHEMA: dict[str, Any] = {"pattern": NAME_PATTERN, "maxLength": MAX_NAME}
_NAME = re.compile(NAME_PATTERN)


def job_name(value: str) -> str:
    """A job name as SageMaker allows them (``name``, ``base_job_name``, the API's paths)."""
    if len(value) > MAX_NAME or not _NAME.fullmatch(value):
        raise ValueError(NAME_RULE)
    return value


MAX_TAGS = 50
MAX_RUN_LIMIT = 28 * 24 * 3600
MAX_METRIC_DEFINITIONS = 40
MAX_RETRY_ATTEMPTS = 30
MAX_RETRY_RULES = 20
MAX_CONTAINER_WORDS = 100
# One word of a container's command, as SageMaker allows them.
ContainerWord = Annotated[str, Field(min_length=1, max_length=256)]

# Validation context of a spec read back from the database (``JobRecord.load``): what it
# was submitted with was checked then, under the rules of that time.
STORED = "stored"


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
    enabled: bool = Field(default=False, description="Runs the job under this mode.")


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
        described = (
            f"The `{key}` mode: `enabled` runs the job under it."
            if len(path) == len(under) + 1
            else f"The `{key}` modes, of which one may be enabled."
        )
        keys[key] = (model | None, Field(default=None, description=described))
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
    """One input channel: where its data is and how each instance gets it."""

    # A prefix (every object under it), or a manifest file listing the objects.
    uri: str = Field(
        min_length=1,
        max_length=1024,
        description="Where the data is: an s3:// prefix or manifest, or a file:// path.",
    )
    s3_data_type: Literal["S3Prefix", "ManifestFile"] = Field(
        default="S3Prefix",
        description="S3Prefix: every object under `uri`; ManifestFile: the objects the "
        "manifest at `uri` lists.",
    )
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = Field(
        default="FullyReplicated",
        description="FullyReplicated: every instance gets all of it; ShardedByS3Key: each "
        "gets its share of the objects.",
    )
    input_mode: Literal["File", "Pipe", "FastFile"] = Field(
        default="File",
        description="File: copied to the instance before the script starts; FastFile: "
        "read as the script opens it; Pipe: streamed through a named pipe.",
    )
    content_type: str | None = Field(
        default=None, max_length=256, description="The data's MIME type, told to the script."
    )
    compression: Literal["None", "Gzip"] = Field(
        default="None", description="Gzip: the objects are gzipped (Pipe mode)."
    )


class Tag(Strict):
    key: str = Field(min_length=1, max_length=128, description="The tag's key.")
    value: str = Field(default="", max_length=256, description="Its value.")


# The names of the metrics each instance's runtime measures of itself (CPU, memory...)
# begin with this, beside the job's own: no metric definition may take one.
INSTANCE_METRIC_PREFIX = "instance/"


class MetricDefinition(Strict):
    """As in the estimator's ``metric_definitions``: the regex's one group is the value."""

    name: str = Field(min_length=1, max_length=255, description="The metric's name.")
    regex: str = Field(
        min_length=1,
        max_length=500,
        description="Searched in every line of the log; its one group is the value.",
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str, info: ValidationInfo) -> str:
        # A job stored before the names were reserved is read as it was taken.
        if value.startswith(INSTANCE_METRIC_PREFIX) and not (info.context or {}).get(STORED):
            raise ValueError(
                f"names beginning {INSTANCE_METRIC_PREFIX!r} are the instances' own metrics"
            )
        return value

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
        if size > patterns.MAX_METRIC_PROGRAM and not (info.context or {}).get(STORED):
            raise ValueError(
                f"too costly to search every line with: its program has {size} instructions, "
                f"at most {patterns.MAX_METRIC_PROGRAM} (counted repetitions nested in one "
                "another, or very large ones)"
            )
        return value


class ProgressMetric(Strict):
    """Which of the job's metrics tells how far training is: its value divided by
    ``total`` is the fraction done (an epoch metric with the epoch count, say)."""

    name: str = Field(min_length=1, max_length=255, description="One of the job's metrics.")
    total: float = Field(
        default=1.0, gt=0, description="Its value once training is done (the epoch count)."
    )


class RetryRule(Strict):
    """One rule of ``retry_rules``. A failure matches when its cause is one of
    ``on_failure_causes``, its exit code one of ``on_exit_codes`` and its reason matches
    one of the regular expressions ``on_failure_reasons`` (each when given); a rule with
    none of them matches every failure. The first rule that matches decides."""

    on_failure_causes: list[FailureCause] = Field(
        default_factory=list,
        max_length=len(FailureCause),
        description="Causes the rule matches, as the job's failure_cause names them ("
        + ", ".join(cause.value for cause in FailureCause)
        + "): a typed match, where a pattern would depend on a reason's words.",
    )
    on_exit_codes: list[Int32] = Field(
        default_factory=list, max_length=64, description="Exit codes the rule matches."
    )
    on_failure_reasons: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Regular expressions, one of which the failure reason must match.",
    )
    action: Literal["retry", "fail"] = Field(
        description="retry: restart the job (within `max_retry_attempts`); fail: end it."
    )

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
    # How the image differs from what the job's fields named (its Python, say).
    note: str | None = Field(default=None, max_length=1024)

    @property
    def label(self) -> str:
        return self.container or self.name
