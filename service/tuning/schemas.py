"""Request and response bodies of the tuning-jobs API, one schema per direction.

Field names follow SageMaker's CreateHyperParameterTuningJob in snake case; the trials'
training job is a training job's own spec (``JobCreate``) without a name, which each
trial gets from the tuning job (``<tuning job>-<number>-<hash>``, as SageMaker names them).
A tuning job tunes one training job (``training_job``, its ``objective`` and
``parameter_ranges``) or several (``training_job_definitions``, each with its own objective
metric and ranges, as SageMaker's TrainingJobDefinitions): every reader takes them as
``TuningJobCreate.definitions``, the same for both forms.
Every rule that needs no server configuration is checked here, naming the field; what the
server's configuration decides about the training job is checked when the tuning job is
created (``service.tuning.service``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.jobs.schemas import JobCreate
from service.jobs.spec_parts import MAX_TAGS, Strict, Tag, invalid

NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}$"
MAX_NAME = 32
_NAME = re.compile(NAME_PATTERN)
NAME_RULE = (
    "must be 1 to 32 letters, digits and hyphens, starting and ending with a letter or digit"
)
# SageMaker's limits: 30 ranges of each kind, 30 values a categorical range; a grid of at
# most this many points (all its trials are known when the tuning job is created).
MAX_RANGES = 30
MAX_CATEGORICAL_VALUES = 30
MAX_GRID_POINTS = 10_000
# The most trials a tuning job may ask for, and run at once, as SageMaker's quotas.
MAX_TRAINING_JOBS = 500
MAX_PARALLEL_TRAINING_JOBS = 100
# The range SageMaker allows a tuning job's own runtime: 2 minutes to half a year.
MIN_TUNING_RUNTIME = 120
MAX_TUNING_RUNTIME = 15_768_000
# Hyperband's resources are steps (a trial's objective points): at most SageMaker's 20,000
# epochs. Without MaxResource, SageMaker reads it from the first of these static
# hyperparameters the training job has.
MAX_RESOURCE = 20_000
EPOCH_HYPERPARAMETERS = ("epochs", "numepochs", "n-epochs", "n_epochs", "num_epochs")

Strategy = Literal["Bayesian", "Random", "Grid", "Hyperband"]
ObjectiveType = Literal["Minimize", "Maximize"]
Scaling = Literal["Auto", "Linear", "Logarithmic", "ReverseLogarithmic"]
Status = Literal["InProgress", "Completed", "Failed", "Stopping", "Stopped"]
WarmStartType = Literal["IdenticalDataAndAlgorithm", "TransferLearning"]
# SageMaker's limit on a warm start's parent tuning jobs.
MAX_PARENTS = 5
# SageMaker's limits on TrainingJobDefinitions: at most 10, each named so.
MAX_DEFINITIONS = 10
DEFINITION_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$"
MAX_DEFINITION_NAME = 64
# What the strategies with several definitions are (Grid's points and Hyperband's
# resources are of one training job's ranges and epochs, and a warm start's parents of
# one too).
STRATEGIES_OF_SEVERAL = ("Random", "Bayesian")
ParameterValue = str | int | float | bool


def tuning_job_name(value: str) -> str:
    if len(value) > MAX_NAME or not _NAME.fullmatch(value):
        raise ValueError(NAME_RULE)
    return value


class Objective(Strict):
    type: ObjectiveType = Field(description="Whether lower or higher values are better.")
    metric_name: str = Field(
        min_length=1,
        max_length=255,
        description="A metric the training job's `metric_definitions` define; its final "
        "value is the trial's objective.",
    )


class ResourceLimits(Strict):
    max_number_of_training_jobs: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TRAINING_JOBS,
        description="How many trials in all (required but for Grid, whose grid decides).",
    )
    max_parallel_training_jobs: int = Field(
        ge=1, le=MAX_PARALLEL_TRAINING_JOBS, description="How many trials run at once at most."
    )
    max_runtime_in_seconds: int | None = Field(
        default=None,
        ge=MIN_TUNING_RUNTIME,
        le=MAX_TUNING_RUNTIME,
        description="How long the tuning job may run, from its creation: then it asks for "
        "no more trials, stops those running and ends Stopped, saying why. Empty: no limit "
        "but its trials'.",
    )


class HyperbandConfig(Strict):
    min_resource: int = Field(
        default=1,
        ge=1,
        le=MAX_RESOURCE,
        description="Steps (objective points) a trial reports before Hyperband may stop it.",
    )
    max_resource: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RESOURCE,
        description="Steps after which a trial is stopped; without it, the training job's "
        f"static hyperparameter {' / '.join(EPOCH_HYPERPARAMETERS)} (the first it has).",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.max_resource is not None and self.min_resource > self.max_resource:
            raise invalid(
                "HyperbandConfig", ("max_resource",), "must be at least the minimum resource"
            )
        return self


class StrategyConfig(Strict):
    hyperband_strategy_config: HyperbandConfig = Field(
        description="For the Hyperband strategy, and only for it."
    )


class WarmStartConfig(Strict):
    warm_start_type: WarmStartType = Field(
        description="IdenticalDataAndAlgorithm: the parents trained the same training "
        "image and framework on the same input channels, and the overall best trial is "
        "the best of theirs and this tuning job's; TransferLearning: other data or "
        "another image, the parents' results only guide the search."
    )
    parent_tuning_jobs: list[str] = Field(
        min_length=1,
        max_length=MAX_PARENTS,
        description="Ended tuning jobs of the project, with the same objective and as many "
        "hyperparameters (static and tuned together), whose trials the search starts from.",
    )

    @field_validator("parent_tuning_jobs")
    @classmethod
    def _parents(cls, names: list[str]) -> list[str]:
        for name in names:
            tuning_job_name(name)
        if len(set(names)) != len(names):
            raise ValueError("a parent tuning job is named twice")
        return names


class _Range(Strict):
    name: str = Field(min_length=1, max_length=256, description="The hyperparameter tuned.")


class ContinuousRange(_Range):
    min_value: float
    max_value: float
    scaling_type: Scaling = "Auto"

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if not (math.isfinite(self.min_value) and math.isfinite(self.max_value)):
            raise invalid("ContinuousRange", ("min_value",), "bounds must be finite numbers")
        if self.min_value >= self.max_value:
            raise invalid("ContinuousRange", ("max_value",), "must be above min_value")
        if self.scaling_type == "Logarithmic" and self.min_value <= 0:
            raise invalid(
                "ContinuousRange", ("min_value",), "must be above 0 for Logarithmic scaling"
            )
        if self.scaling_type == "ReverseLogarithmic" and not (
            self.min_value >= 0 and self.max_value < 1
        ):
            raise invalid(
                "ContinuousRange",
                ("scaling_type",),
                "ReverseLogarithmic scaling needs 0 <= min_value and max_value < 1",
            )
        return self


class IntegerRange(_Range):
    min_value: int
    max_value: int
    scaling_type: Literal["Auto", "Linear", "Logarithmic"] = Field(
        default="Auto",
        description="ReverseLogarithmic is for continuous ranges only, as in SageMaker.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_value > self.max_value:
            raise invalid("IntegerRange", ("max_value",), "must not be below min_value")
        if self.scaling_type == "Logarithmic" and self.min_value <= 0:
            raise invalid("IntegerRange", ("min_value",), "must be above 0 for Logarithmic scaling")
        return self

    @property
    def size(self) -> int:
        return self.max_value - self.min_value + 1


class CategoricalRange(_Range):
    values: list[ParameterValue] = Field(min_length=1, max_length=MAX_CATEGORICAL_VALUES)

    @field_validator("values")
    @classmethod
    def _distinct(cls, values: list[ParameterValue]) -> list[ParameterValue]:
        for value in values:
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError("values must be finite numbers, text or booleans")
        if len({(type(v), v) for v in values}) != len(values):
            raise ValueError("a value is given twice")
        return values


class ParameterRanges(Strict):
    continuous: list[ContinuousRange] = Field(default_factory=list, max_length=MAX_RANGES)
    integer: list[IntegerRange] = Field(default_factory=list, max_length=MAX_RANGES)
    categorical: list[CategoricalRange] = Field(default_factory=list, max_length=MAX_RANGES)

    @model_validator(mode="after")
    def _named_once(self) -> Self:
        seen: set[str] = set()
        kinds: dict[str, Sequence[_Range]] = {
            "continuous": self.continuous,
            "integer": self.integer,
            "categorical": self.categorical,
        }
        for kind, items in kinds.items():
            for index, item in enumerate(items):
                if item.name in seen:
                    raise invalid(
                        "ParameterRanges",
                        (kind, index, "name"),
                        f"hyperparameter {item.name!r} has a range already",
                    )
                seen.add(item.name)
        if not seen:
            raise invalid("ParameterRanges", (), "give at least one range to tune")
        return self

    @property
    def names(self) -> list[str]:
        return [item.name for item in (*self.continuous, *self.integer, *self.categorical)]


class TrainingJobDefinition(Strict):
    """One of several training jobs a tuning job tunes, as SageMaker's
    TrainingJobDefinitions: each trial is one of them, with its ranges' values."""

    definition_name: str = Field(
        pattern=DEFINITION_NAME_PATTERN,
        max_length=MAX_DEFINITION_NAME,
        description="Unique in the tuning job; each trial names the definition it ran.",
    )
    objective: Objective = Field(
        description="Its objective metric; every definition's objective has the same type."
    )
    parameter_ranges: ParameterRanges
    training_job: JobCreate = Field(
        description="Its trials' training job, without a name: its hyperparameters are the "
        "static ones, each trial adds the tuned ones."
    )


@dataclass(frozen=True)
class Definition:
    """A training job the tuning job tunes, whichever form the spec gave it in: ``name``
    None for the one ``training_job``; ``loc`` where the spec holds it."""

    name: str | None
    objective: Objective
    parameter_ranges: ParameterRanges
    training_job: JobCreate
    loc: tuple[str | int, ...]

    @property
    def training_job_loc(self) -> tuple[str | int, ...]:
        return (*self.loc, "training_job")


class TuningJobCreate(Strict):
    """A tuning job as a client creates it."""

    name: str = Field(
        json_schema_extra={"pattern": NAME_PATTERN, "maxLength": MAX_NAME},
        description="Unique in the project; each trial's training job is named after it.",
    )
    strategy: Strategy = Field(
        description="Random, Bayesian (Optuna's TPE), Grid (every combination of the "
        "categorical and integer ranges, in an order the seed shuffles) or Hyperband "
        "(random parameters, trials stopped by Optuna's HyperbandPruner)."
    )
    strategy_config: StrategyConfig | None = Field(
        default=None, description="Hyperband's resources; for the Hyperband strategy only."
    )
    objective: Objective | None = Field(
        default=None, description="The training job's objective (with `training_job`)."
    )
    resource_limits: ResourceLimits
    parameter_ranges: ParameterRanges | None = Field(
        default=None, description="The training job's ranges (with `training_job`)."
    )
    random_seed: int | None = Field(
        default=None,
        ge=0,
        le=2**31 - 1,
        description="The same seed asks the same parameters of the same results; without "
        "one, the server picks one and shows it.",
    )
    early_stopping_type: Literal["Off", "Auto"] = Field(
        default="Off",
        description="Auto: a running trial whose best objective so far is worse than the "
        "median of the completed trials' running averages at the same step is stopped "
        "(SageMaker's median stopping rule). Not with Hyperband, which stops trials itself.",
    )
    warm_start_config: WarmStartConfig | None = Field(
        default=None,
        description="Start the search from the trials of up to five ended tuning jobs "
        "(their parameters and objectives are told to the search before its first "
        "trial). Not with the Grid strategy, whose points are fixed.",
    )
    training_job: JobCreate | None = Field(
        default=None,
        description="Each trial's training job, without a name: its hyperparameters are "
        "the static ones, each trial adds the tuned ones. With `objective` and "
        "`parameter_ranges`; or give `training_job_definitions` instead of the three.",
    )
    training_job_definitions: list[TrainingJobDefinition] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DEFINITIONS,
        description="Several training jobs to tune at once (SageMaker's "
        "TrainingJobDefinitions), each with its objective metric and ranges: the search "
        "picks a definition and its values for each trial, and the best trial is the best "
        "of all. Instead of `training_job`, `objective` and `parameter_ranges`; for the "
        f"{' and '.join(STRATEGIES_OF_SEVERAL)} strategies, without warm start.",
    )
    tags: list[Tag] = Field(
        default_factory=list,
        max_length=MAX_TAGS,
        description="The tuning job's tags, each `{key, value}`: each trial's training job "
        "gets them too, over its own of the same key (as SageMaker adds a tuning job's "
        "tags to its training jobs).",
    )

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_as_written(cls, value: Any) -> Any:
        # As a training job's are written: SageMaker's {Key, Value} or a mapping.
        return JobCreate.tags_as_written(value)

    @field_validator("name")
    @classmethod
    def _name_rule(cls, value: str) -> str:
        return tuning_job_name(value)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        title = "TuningJobCreate"
        self._check_form(title)
        for definition in self.definitions:
            self._check_definition(title, definition)
        self._check_strategy(title)
        return self

    def _check_form(self, title: str) -> None:
        """One training job (its objective and ranges) or several definitions, not both."""
        single = ("training_job", "objective", "parameter_ranges")
        if self.training_job_definitions is None:
            for field in single:
                if getattr(self, field) is None:
                    raise invalid(
                        title, (field,), "required (or give training_job_definitions instead)"
                    )
            return
        for field in single:
            if getattr(self, field) is not None:
                raise invalid(
                    title,
                    (field,),
                    "give it in each of training_job_definitions instead: not with them",
                )
        names = [d.definition_name for d in self.training_job_definitions]
        first = self.training_job_definitions[0].objective.type
        for index, definition in enumerate(self.training_job_definitions):
            if names.index(definition.definition_name) != index:
                raise invalid(
                    title,
                    ("training_job_definitions", index, "definition_name"),
                    f"{definition.definition_name!r} names another definition already",
                )
            if definition.objective.type != first:
                raise invalid(
                    title,
                    ("training_job_definitions", index, "objective", "type"),
                    f"must be {first}, as the first definition's: the best trial is the "
                    "best of all",
                )
        if self.strategy not in STRATEGIES_OF_SEVERAL:
            raise invalid(
                title,
                ("strategy",),
                f"the {self.strategy} strategy tunes one training job: with "
                f"training_job_definitions, {' or '.join(STRATEGIES_OF_SEVERAL)}",
            )
        if self.warm_start_config is not None:
            raise invalid(
                title,
                ("warm_start_config",),
                "a warm start is for one training job: not with training_job_definitions",
            )

    def _check_definition(self, title: str, definition: Definition) -> None:
        template = definition.training_job
        where = definition.training_job_loc
        for field in ("name", "base_job_name"):
            if getattr(template, field) is not None:
                raise invalid(
                    title,
                    (*where, field),
                    "each trial is named after the tuning job: give no name",
                )
        defined = [m.name for m in template.metric_definitions]
        if definition.objective.metric_name not in defined:
            raise invalid(
                title,
                (*definition.loc, "objective", "metric_name"),
                f"{definition.objective.metric_name!r} is not one of the training job's "
                f"metric_definitions ({', '.join(map(repr, defined)) or 'none'})",
            )
        for name in definition.parameter_ranges.names:
            if name in template.hyperparameters:
                raise invalid(
                    title,
                    (*where, "hyperparameters", name),
                    "is tuned: give it as a range, not as a static hyperparameter",
                )
        count = len(trial_tags(self, definition))
        if count > MAX_TAGS:
            raise invalid(
                title,
                ("tags",),
                f"with the training job's own, each trial's training job would have "
                f"{count} tags, over the {MAX_TAGS} a training job may have",
            )

    @property
    def definitions(self) -> list[Definition]:
        """The training jobs tuned: the one of ``training_job``, or each of
        ``training_job_definitions`` (the form is checked when the spec is made)."""
        if self.training_job_definitions is None:
            assert self.training_job is not None
            assert self.objective is not None
            assert self.parameter_ranges is not None
            return [Definition(None, self.objective, self.parameter_ranges, self.training_job, ())]
        return [
            Definition(
                item.definition_name,
                item.objective,
                item.parameter_ranges,
                item.training_job,
                ("training_job_definitions", index),
            )
            for index, item in enumerate(self.training_job_definitions)
        ]

    @property
    def objective_words(self) -> str:
        """The objective as a line says it: "Minimize loss", or with several definitions
        each one's metric ("Minimize loss (mlp), val_loss (cnn)")."""
        if self.training_job_definitions is None:
            return f"{self.objective_type} {self.definitions[0].objective.metric_name}"
        metrics = ", ".join(f"{d.objective.metric_name} ({d.name})" for d in self.definitions)
        return f"{self.objective_type} {metrics}"

    def metric_of(self, definition: str | None) -> str:
        """The objective metric of a trial that ran ``definition``."""
        return self.definition(definition).objective.metric_name

    def definition(self, name: str | None) -> Definition:
        """The definition a trial ran (None: the one training job)."""
        for found in self.definitions:
            if found.name == name:
                return found
        raise KeyError(name)

    @property
    def objective_type(self) -> ObjectiveType:
        """Whether lower or higher objectives are better: every definition's (checked)."""
        return self.definitions[0].objective.type

    def _check_strategy(self, title: str) -> None:
        self._check_hyperband(title)
        if self.warm_start_config is not None and self.strategy == "Grid":
            raise invalid(
                title,
                ("warm_start_config",),
                "the Grid strategy tries fixed points: warm start is for Random, Bayesian "
                "and Hyperband",
            )
        limits = self.resource_limits
        if self.strategy != "Grid":
            if limits.max_number_of_training_jobs is None:
                raise invalid(
                    title,
                    ("resource_limits", "max_number_of_training_jobs"),
                    f"required for the {self.strategy} strategy",
                )
            return
        ranges = self.definitions[0].parameter_ranges
        if ranges.continuous:
            raise invalid(
                title,
                ("parameter_ranges", "continuous"),
                "the Grid strategy takes categorical and integer ranges only",
            )
        for index, item in enumerate(ranges.integer):
            if item.scaling_type == "Logarithmic":
                raise invalid(
                    title,
                    ("parameter_ranges", "integer", index, "scaling_type"),
                    "the Grid strategy tries every value: Linear or Auto only",
                )
        if grid_size(ranges) > MAX_GRID_POINTS:
            raise invalid(
                title,
                ("parameter_ranges",),
                f"the grid has {grid_size(ranges)} points, over the {MAX_GRID_POINTS} allowed",
            )

    def _check_hyperband(self, title: str) -> None:
        if self.strategy != "Hyperband":
            if self.strategy_config is not None:
                raise invalid(
                    title, ("strategy_config",), "only for the Hyperband strategy: give none"
                )
            return
        # Hyperband stops trials itself (SageMaker: TrainingJobEarlyStoppingType must be
        # Off with Hyperband).
        if self.early_stopping_type != "Off":
            raise invalid(
                title, ("early_stopping_type",), "must be Off with Hyperband, which stops trials"
            )
        given = self.strategy_config.hyperband_strategy_config if self.strategy_config else None
        loc = ("strategy_config", "hyperband_strategy_config", "max_resource")
        if (given is None or given.max_resource is None) and self._epochs() is None:
            raise invalid(
                title,
                loc,
                "required: give it, or one of the static hyperparameters "
                f"{', '.join(EPOCH_HYPERPARAMETERS)} as a whole number from 1 to "
                f"{MAX_RESOURCE}",
            )
        low, high = self.hyperband_resources
        if low > high:
            raise invalid(
                title,
                loc,
                f"{high} (from the static hyperparameters) is below the minimum resource {low}",
            )

    def _epochs(self) -> int | None:
        """The training job's epochs, read as SageMaker infers MaxResource."""
        statics = self.definitions[0].training_job.hyperparameters
        for key in EPOCH_HYPERPARAMETERS:
            if key in statics:
                value = statics[key]
                try:
                    epochs = int(str(value))
                except ValueError:
                    return None
                return epochs if 1 <= epochs <= MAX_RESOURCE else None
        return None

    @property
    def hyperband_resources(self) -> tuple[int, int]:
        """Hyperband's (min, max) resource, in steps: what is given, else MaxResource
        inferred from the static hyperparameters (checked when the spec was made)."""
        given = self.strategy_config.hyperband_strategy_config if self.strategy_config else None
        low = given.min_resource if given else 1
        high = given.max_resource if given and given.max_resource else self._epochs()
        return low, high or low

    @property
    def max_trials(self) -> int:
        """How many trials the tuning job runs in all."""
        most = self.resource_limits.max_number_of_training_jobs
        if self.strategy == "Grid":
            size = grid_size(self.definitions[0].parameter_ranges)
            return size if most is None else min(most, size)
        return most or 0  # never None but for Grid (checked above)


def trial_tags(spec: TuningJobCreate, definition: Definition) -> list[Tag]:
    """Each trial's training job's tags: its own, and the tuning job's over them."""
    merged = {tag.key: tag for tag in definition.training_job.tags}
    merged.update({tag.key: tag for tag in spec.tags})
    return list(merged.values())


def grid_size(ranges: ParameterRanges) -> int:
    size = 1
    for integer in ranges.integer:
        size *= integer.size
    for categorical in ranges.categorical:
        size *= len(categorical.values)
    return size


def stored(spec: dict[str, Any]) -> TuningJobCreate:
    """A stored tuning job's spec (checked when it was created)."""
    return TuningJobCreate.model_validate(spec)


class _FromRow(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class TrialSummary(_FromRow):
    """A trial as a listing of tuning jobs shows their best."""

    number: int
    # The trial's training job.
    name: str
    # The training job definition it ran, with several (None with one training job).
    definition: str | None = None
    status: str
    objective: float | None


class TrialPublic(TrialSummary):
    parameters: dict[str, Any]
    # Pending, Succeeded or Failed (the training job ended without the objective metric).
    objective_status: str
    # Why its training job failed, or why the tuner stopped it early.
    failure_reason: str | None
    created_at: datetime
    ended_at: datetime | None


class OverallBestTrial(TrialPublic):
    """A warm start's best trial of its own and its parents' (IdenticalDataAndAlgorithm)."""

    tuning_job: str = Field(description="The tuning job that ran it: this one or a parent.")


class DefinitionObjective(BaseModel):
    """A training job definition's objective, as a summary shows it."""

    definition: str | None = Field(description="None for a tuning job of one training job.")
    type: ObjectiveType
    metric_name: str


class TrainingJobCounts(BaseModel):
    """The trials' training jobs by status, as SageMaker's TrainingJobStatusCounters."""

    completed: int = 0
    in_progress: int = 0
    failed: int = 0
    stopped: int = 0


class ObjectiveCounts(BaseModel):
    """The trials by their objective, as SageMaker's ObjectiveStatusCounters."""

    succeeded: int = 0
    pending: int = 0
    failed: int = 0


class TuningJobSummary(BaseModel):
    """A tuning job as a listing shows it: with what a table of tuning jobs needs (its
    objective, its counters, its best trial), so that no row needs a request of its own."""

    name: str
    project: str
    strategy: str
    status: str
    created_at: datetime
    ended_at: datetime | None
    objective: Objective | None = Field(
        description="The objective of its one training job; None with several "
        "training_job_definitions, each of which has its own (see `objectives`)."
    )
    objective_type: ObjectiveType = Field(
        description="Whether lower or higher objectives are better, of every definition."
    )
    objectives: list[DefinitionObjective] = Field(
        description="Each training job's objective: one, or one a definition, so that a "
        "page or a line says a trial's metric without reading the spec."
    )
    max_trials: int = Field(
        description="How many trials it runs in all: its limit, or a Grid's every point."
    )
    training_job_counts: TrainingJobCounts
    objective_counts: ObjectiveCounts
    best_trial: TrialSummary | None


class TuningJobPublic(TuningJobSummary):
    id: str
    failure_reason: str | None
    updated_at: datetime
    spec: TuningJobCreate
    best_trial: TrialPublic | None
    overall_best_trial: OverallBestTrial | None = Field(
        default=None,
        description="With an IdenticalDataAndAlgorithm warm start: the best trial of this "
        "tuning job and its parents.",
    )
    trials: list[TrialPublic]


class TuningJobsPage(BaseModel):
    items: list[TuningJobSummary]
    next_cursor: str | None
