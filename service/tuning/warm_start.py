"""A warm start: the parent tuning jobs a tuning job's search starts from.

When the tuning job is created its parents are checked by SageMaker's rules (ended, in
the project, the same objective, as many hyperparameters static and tuned together, a
hyperparameter tuned by both tuned as the same kind of range; for
IdenticalDataAndAlgorithm the same training image and framework and the same input
channels). Each ask then tells the search the parents' trials that reported the objective
(``search.ask``'s ``prior``), and an IdenticalDataAndAlgorithm tuning job's overall best
trial is the best of its own and its parents'. As in SageMaker, a parent's own parents
are not followed.
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy.orm import Session

from contract import hyperparameters
from service.kit.errors import SpecError
from service.tuning import repository
from service.tuning.models import TuningJob, TuningTrial
from service.tuning.schemas import Definition, TuningJobCreate, stored
from service.tuning.search import Earlier

# What IdenticalDataAndAlgorithm keeps from its parents' training job: the algorithm
# (its image or framework) and the data (each channel's place).
_ALGORITHM = ("image_uri", "framework", "framework_version", "py_version")


def check(session: Session, spec: TuningJobCreate, project: str) -> None:
    """Refuse a warm start whose parents break a rule, naming the parent."""
    config = spec.warm_start_config
    if config is None:
        return
    for index, name in enumerate(config.parent_tuning_jobs):
        loc = ("warm_start_config", "parent_tuning_jobs", index)
        parent = repository.get(session, name, project)
        if parent is None:
            raise SpecError(loc, f"no tuning job named {name!r} in project {project!r}")
        if parent.status not in repository.TERMINAL:
            raise SpecError(
                loc, f"tuning job {name!r} is {parent.status}: a parent must have ended"
            )
        kept = stored(parent.spec)
        if kept.training_job_definitions is not None:
            raise SpecError(
                loc,
                f"tuning job {name!r} tuned several training job definitions: a warm "
                "start's parents tune one training job, as it does",
            )
        problem = _differs(kept, spec)
        if problem is not None:
            raise SpecError(loc, f"tuning job {name!r} {problem}")


def _differs(parent_spec: TuningJobCreate, child_spec: TuningJobCreate) -> str | None:
    # Both tune one training job (the child's spec and ``check`` make sure).
    parent, child = parent_spec.definitions[0], child_spec.definitions[0]
    if parent.objective != child.objective:
        return (
            f"has another objective ({parent.objective.type} {parent.objective.metric_name!r}): "
            "a warm start keeps its parents' objective"
        )
    theirs, ours = _hyperparameter_count(parent), _hyperparameter_count(child)
    if theirs != ours:
        return (
            f"has {theirs} hyperparameters, static and tuned, and this one {ours}: a warm "
            "start keeps their number"
        )
    parent_kinds, child_kinds = _range_kinds(parent), _range_kinds(child)
    for name, kind in child_kinds.items():
        if parent_kinds.get(name, kind) != kind:
            return f"tunes {name!r} as a {parent_kinds[name]} range, and this one as {kind}"
    config = child_spec.warm_start_config
    if config is None or config.warm_start_type != "IdenticalDataAndAlgorithm":
        return None
    for field in _ALGORITHM:
        if getattr(parent.training_job, field) != getattr(child.training_job, field):
            return (
                f"trained with another {field}: IdenticalDataAndAlgorithm keeps the "
                "algorithm (TransferLearning does not)"
            )
    if _channels(parent) != _channels(child):
        return (
            "trained on other input channels: IdenticalDataAndAlgorithm keeps the data "
            "(TransferLearning does not)"
        )
    return None


def _hyperparameter_count(definition: Definition) -> int:
    # Not the objective's name, which every trial gets whether the request gave it or not.
    statics = set(definition.training_job.hyperparameters) - {hyperparameters.TUNING_OBJECTIVE}
    return len(statics | set(definition.parameter_ranges.names))


def _range_kinds(definition: Definition) -> dict[str, str]:
    ranges = definition.parameter_ranges
    return {
        **{item.name: "continuous" for item in ranges.continuous},
        **{item.name: "integer" for item in ranges.integer},
        **{item.name: "categorical" for item in ranges.categorical},
    }


def _channels(definition: Definition) -> dict[str, str]:
    return {name: channel.uri for name, channel in definition.training_job.inputs.items()}


def parents(session: Session, tuning: TuningJob, spec: TuningJobCreate) -> list[TuningJob]:
    """The tuning job's parents that are still stored (none without a warm start)."""
    config = spec.warm_start_config
    if config is None:
        return []
    found = (repository.get(session, name, tuning.project) for name in config.parent_tuning_jobs)
    return [parent for parent in found if parent is not None]


def prior(session: Session, tuning: TuningJob, spec: TuningJobCreate) -> list[Earlier]:
    """The parents' trials that reported the objective, as the search is told of them:
    each with its tuned values and its tuning job's static ones (decoded as the script
    reads them), so that a range this tuning job tunes and its parent did not still
    finds the value the trial ran with."""
    return [
        Earlier(
            parameters={**statics, **trial.parameters},
            state="complete",
            objective=trial.objective,
        )
        for parent in parents(session, tuning, spec)
        for statics, trial in _scored(parent)
    ]


def _scored(parent: TuningJob) -> Iterator[tuple[dict[str, object], TuningTrial]]:
    # A parent of one training job (checked when the warm start was created).
    definition = stored(parent.spec).definitions[0]
    statics = hyperparameters.decode(definition.training_job.hyperparameters)
    for trial in parent.trials:
        if trial.objective_status == "Succeeded" and trial.objective is not None:
            yield statics, trial


def overall_best(session: Session, tuning: TuningJob, spec: TuningJobCreate) -> TuningTrial | None:
    """For IdenticalDataAndAlgorithm, the best trial of the tuning job and its parents
    (SageMaker's OverallBestTrainingJob); None otherwise, or before any reported."""
    config = spec.warm_start_config
    if config is None or config.warm_start_type != "IdenticalDataAndAlgorithm":
        return None
    trials = [
        *tuning.trials,
        *(trial for parent in parents(session, tuning, spec) for trial in parent.trials),
    ]
    # Of equal objectives, the earlier trial: numbers restart in each tuning job, so
    # order by creation.
    ordered = sorted(trials, key=lambda trial: trial.created_at)
    scored = [t for t in ordered if t.objective_status == "Succeeded" and t.objective is not None]
    if not scored:
        return None
    sign = 1.0 if spec.objective_type == "Minimize" else -1.0
    return min(scored, key=lambda t: sign * (t.objective or 0.0))
