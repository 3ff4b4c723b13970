"""Tuning jobs: creating, describing, listing and stopping them.

Routes (REST and SageMaker's wire) call these; these flush; the request commits. The
trials are the tuner's (``service.tuning.tuner``), which each of these wakes after the
commit: a stop only marks the tuning job Stopping, and the tuner stops its trials.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.auth.access import Principal, Role
from service.kit.db import utcnow
from service.kit.enqueue import enqueue_tuning
from service.kit.errors import Conflict, NotFound, SpecError
from service.settings import Settings
from service.training.preparation import prepare
from service.tuning import progress, repository, warm_start
from service.tuning.models import TuningJob, TuningTrial
from service.tuning.schemas import (
    DefinitionObjective,
    OverallBestTrial,
    TrialPublic,
    TrialSummary,
    TuningJobCreate,
    TuningJobPublic,
    TuningJobsPage,
    TuningJobSummary,
    stored,
)
from service.tuning.trials import first_values, trial_name, trial_spec


def create(
    session: Session,
    settings: Settings,
    spec: TuningJobCreate,
    project: str,
    *,
    sagemaker_request: dict[str, Any] | None = None,
) -> TuningJob:
    """Store a tuning job, its trials' training job checked as a submission would be
    (instance type, backend, source, places), and wake the tuner after the commit."""
    tuning_id = uuid.uuid4().hex
    _check_training_job(settings, spec, project, tuning_id)
    warm_start.check(session, spec, project)
    seed = spec.random_seed if spec.random_seed is not None else secrets.randbelow(2**31)
    kept = spec.model_dump(mode="json", exclude_unset=True)
    kept["random_seed"] = seed
    now = utcnow()
    tuning = TuningJob(
        id=tuning_id,
        name=spec.name,
        project=project,
        spec=kept,
        strategy=spec.strategy,
        status="InProgress",
        sagemaker_request=sagemaker_request,
        created_at=now,
        updated_at=now,
        trials_asked=0,
        version=1,
    )
    session.add(tuning)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"a tuning job named {spec.name!r} already exists") from exc
    enqueue_tuning(session, settings, tuning.id)
    return tuning


def _check_training_job(
    settings: Settings, spec: TuningJobCreate, project: str, tuning_id: str
) -> None:
    """Refuse now what would refuse every trial of a definition: each checked on a trial's
    spec of its first values."""
    name = trial_name(spec.name, tuning_id, 1)
    for definition in spec.definitions:
        values = first_values(definition.parameter_ranges)
        where = definition.training_job_loc
        try:
            prepare(settings, trial_spec(spec, definition, name, values), project)
        except SpecError as exc:
            loc = exc.loc if exc.loc[: len(where)] == where else (*where, *exc.loc)
            raise SpecError(loc, exc.field_message) from None


def get(
    session: Session,
    name: str,
    viewer: Principal,
    project: str | None = None,
    *,
    to_change: bool = False,
) -> TuningJob:
    """The tuning job of that name in the caller's project (a server administrator may
    name another); a project the caller cannot see holds none."""
    project = project or viewer.project
    tuning = (
        repository.get(session, name, project, to_change=to_change)
        if viewer.sees(project)
        else None
    )
    if tuning is None:
        raise NotFound(f"no tuning job named {name!r}")
    return tuning


def page(
    session: Session,
    viewer: Principal,
    project: str | None,
    *,
    limit: int,
    cursor: str | None,
    status: str | None = None,
) -> TuningJobsPage:
    """A page of tuning jobs, each with its counters and best trial: two queries, whatever
    the page's size."""
    rows, next_cursor = repository.page(
        session, viewer.project_in_sight(project), limit=limit, cursor=cursor, status=status
    )
    trials = repository.trial_states(session, [row.id for row in rows])
    items = [_summary(row, stored(row.spec), trials[row.id]) for row in rows]
    return TuningJobsPage(items=items, next_cursor=next_cursor)


def _summary(
    tuning: Row[Any] | TuningJob, spec: TuningJobCreate, trials: Sequence[progress.TrialState]
) -> TuningJobSummary:
    best = progress.best(trials, spec.objective_type)
    return TuningJobSummary(
        name=tuning.name,
        project=tuning.project,
        strategy=tuning.strategy,
        status=tuning.status,
        created_at=tuning.created_at,
        ended_at=tuning.ended_at,
        objective=spec.objective,
        objective_type=spec.objective_type,
        objectives=[
            DefinitionObjective(definition=d.name, **d.objective.model_dump())
            for d in spec.definitions
        ],
        max_trials=spec.max_trials,
        training_job_counts=progress.training_job_counts(trials),
        objective_counts=progress.objective_counts(trials),
        best_trial=TrialSummary.model_validate(best) if best is not None else None,
    )


def stop(
    session: Session, settings: Settings, name: str, user: Principal, project: str | None = None
) -> TuningJob:
    """Mark the tuning job Stopping; the tuner then stops its running trials and asks for
    no more, and once they have ended the tuning job is Stopped."""
    tuning = get(session, name, user, project, to_change=True)
    user.require(Role.MEMBER, tuning.project, "stopping a tuning job")
    if tuning.status in repository.TERMINAL:
        raise Conflict(f"tuning job {name!r} has already ended ({tuning.status})")
    if tuning.status == "InProgress":
        tuning.status = "Stopping"
        session.flush()
        enqueue_tuning(session, settings, tuning.id)
    return tuning


def public(session: Session, tuning: TuningJob) -> TuningJobPublic:
    spec = stored(tuning.spec)
    best = progress.best(tuning.trials, spec.objective_type)
    overall = warm_start.overall_best(session, tuning, spec)
    summary = dict(_summary(tuning, spec, tuning.trials))
    # The best trial in full, as every trial is.
    summary["best_trial"] = TrialPublic.model_validate(best) if best is not None else None
    return TuningJobPublic(
        **summary,
        id=tuning.id,
        failure_reason=tuning.failure_reason,
        updated_at=tuning.updated_at,
        spec=spec,
        overall_best_trial=_overall_best(overall) if overall is not None else None,
        trials=[TrialPublic.model_validate(trial) for trial in tuning.trials],
    )


def _overall_best(trial: TuningTrial) -> OverallBestTrial:
    own = TrialPublic.model_validate(trial).model_dump()
    return OverallBestTrial(**own, tuning_job=trial.tuning_job.name)
