"""The tuner: one pass over a tuning job brings it a step closer to its end.

A pass is level-triggered and idempotent, so a duplicate, a lost message or a worker that
dies half-way costs nothing (the sweep sends a pass for every live tuning job):

1. it takes in what the trials' training jobs say: a trial whose job has ended gets its
   status and the final value of the objective metric, read from the job's metrics;
2. a tuning job being stopped has its running trials stopped, and is Stopped once none
   runs; one that has run its ``max_runtime_in_seconds`` (from its stored creation time)
   is stopped so too, the reason kept as its failure reason; one that has asked for all
   its trials is Completed once none runs (Failed if none reported the objective); with
   early stopping (or Hyperband) the running trials' objective points are read and the
   losing trials stopped (``service.tuning.stopping``), the reason noted on the trial
   first, so that a pass that dies before stopping one leaves the next pass to stop it.
   New points are judged by the sweep's next pass (every ``reconcile_interval``, 2 s by
   default), so metric ingestion wakes no tuner;
3. while fewer than MaxParallelTrainingJobs trials run and trials are left to ask for,
   it asks the search for the next trial's parameters and submits its training job
   through the same service as the REST API (projects, capacity and the line apply), one
   trial per transaction: the trial's row and its training job commit together, the
   tuning job's version checked, so a trial is never submitted twice, whichever tuner
   died or ran at the same time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from contract.limits import MAX_REASON
from service.auth.access import Principal, Role
from service.kit.db import session_scope, utcnow
from service.kit.errors import Conflict, NotFound, ResourceLimitExceeded, RunyardError
from service.settings import Settings
from service.training import service as training
from service.tuning import progress, repository, search, stopping, warm_start
from service.tuning.models import TuningJob, TuningTrial
from service.tuning.schemas import Definition, TuningJobCreate, stored
from service.tuning.trials import LIVE, trial_name, trial_request, trial_spec

log = logging.getLogger(__name__)

# Where a trial's notes keep why it was stopped early, once the tuner decided it.
STOPPED_EARLY = "runyard:stopped_early"
# A trial to stop: its training job's name, its project, and the stop's message.
_ToStop = tuple[str, str, str]
_USER_STOP = "Stopping: its tuning job is stopping at the user's request"
_RUNTIME_STOP = "Stopping: its tuning job reached its maximum runtime"


def advance(settings: Settings, tuning_job_id: str) -> None:
    """One pass over the tuning job (see the module's docstring)."""
    try:
        to_stop = _take_in(settings, tuning_job_id)
        for name, project, reason in to_stop:
            _stop_trial(settings, name, project, reason)
        while _ask_one(settings, tuning_job_id):
            pass
    except StaleDataError:
        # Another pass wrote the tuning job meanwhile: it has done this one's work, or
        # the next pass does it.
        log.info("tuning job %s changed during a pass; the next pass goes on", tuning_job_id)


def _take_in(settings: Settings, tuning_job_id: str) -> list[_ToStop]:
    """Steps 1 and 2; the trials to stop (their names and project)."""
    with session_scope(settings.database_url) as session:
        tuning = repository.get_by_id(session, tuning_job_id, to_change=True)
        if tuning is None or tuning.status in repository.TERMINAL:
            return []
        spec = stored(tuning.spec)
        _observe(session, tuning, spec)
        live = [trial for trial in tuning.trials if trial.status in LIVE]
        done = tuning.trials_asked >= spec.max_trials and not live
        if tuning.status == "InProgress" and not done and _out_of_time(tuning, spec):
            _run_out(tuning, spec)
        if tuning.status == "Stopping":
            # A stop for want of time keeps its reason from Stopping to Stopped; a
            # person's stop has none.
            if not live:
                _end(tuning, "Stopped", tuning.failure_reason)
            why = _RUNTIME_STOP if tuning.failure_reason else _USER_STOP
            return [(t.name, tuning.project, why) for t in live if t.status != "Stopping"]
        if done:
            _end_of_trials(tuning, spec)
        to_stop = _early_stops(session, tuning, spec)
        session.flush()
        return to_stop


def _out_of_time(tuning: TuningJob, spec: TuningJobCreate) -> bool:
    """Whether the tuning job has run its max_runtime_in_seconds, by the stored creation
    time: every pass (the sweep's too) judges the same, whichever process runs it."""
    limit = spec.resource_limits.max_runtime_in_seconds
    return limit is not None and utcnow() - tuning.created_at >= timedelta(seconds=limit)


def _run_out(tuning: TuningJob, spec: TuningJobCreate) -> None:
    """Stop the tuning job as a stop would (no more trials, the running ones stopped), with
    why; ``_take_in`` goes on as for any tuning job being stopped."""
    tuning.status = "Stopping"
    tuning.failure_reason = (
        f"The tuning job reached its maximum runtime "
        f"({spec.resource_limits.max_runtime_in_seconds} seconds): no more training jobs "
        "were started and those running were stopped"
    )[:MAX_REASON]
    log.info("tuning job %s reached its maximum runtime; stopping", tuning.name)


def _observe(session: Session, tuning: TuningJob, spec: TuningJobCreate) -> None:
    """Each running trial as its training job is now."""
    running = [trial for trial in tuning.trials if trial.status in LIVE]
    jobs = repository.trial_jobs(session, running)
    ended = [
        job_id
        for job_id, row in jobs.items()
        if row.status not in LIVE  # a job's status is one of SageMaker's
    ]
    values = _final_values(session, spec, running, set(ended))
    for trial in running:
        row = jobs.get(trial.training_job_id or "")
        if row is None:  # deleted, which only an ended job can be
            _trial_ended(trial, "Failed", None, "its training job was deleted")
        elif row.status != trial.status:
            if row.status in LIVE:
                trial.status = row.status
            else:
                _trial_ended(trial, row.status, values.get(row.id), row.failure_reason)
                trial.ended_at = row.ended_at or trial.ended_at


def _final_values(
    session: Session, spec: TuningJobCreate, trials: list[TuningTrial], ended: set[str]
) -> dict[str, float]:
    """The ended trials' final objectives by training job, each read as its definition's
    objective metric."""
    values: dict[str, float] = {}
    for definition in spec.definitions:
        job_ids = [
            t.training_job_id
            for t in trials
            if t.definition == definition.name and t.training_job_id in ended
        ]
        if job_ids:
            metric = definition.objective.metric_name
            values.update(repository.final_values(session, job_ids, metric))
    return values


def _early_stops(session: Session, tuning: TuningJob, spec: TuningJobCreate) -> list[_ToStop]:
    """The running trials the median rule or Hyperband stops, their reasons noted on them;
    with those noted by an earlier pass that are still running (its stop was lost)."""
    if spec.early_stopping_type != "Auto" and spec.strategy != "Hyperband":
        return []
    running = [t for t in tuning.trials if t.status == "InProgress" and t.training_job_id]
    noted = [t for t in running if STOPPED_EARLY in t.strategy_notes]
    undecided = [t for t in running if STOPPED_EARLY not in t.strategy_notes]
    stops = _decide(session, tuning, spec, undecided) if undecided else []
    by_number = {trial.number: trial for trial in undecided}
    for stop in stops:
        trial = by_number[stop.number]
        trial.strategy_notes = {**trial.strategy_notes, STOPPED_EARLY: stop.reason}
        noted.append(trial)
        log.info("tuning job %s: trial %d stops early", tuning.name, trial.number)
    return [(t.name, tuning.project, t.strategy_notes[STOPPED_EARLY]) for t in noted]


def _decide(
    session: Session, tuning: TuningJob, spec: TuningJobCreate, running: list[TuningTrial]
) -> list[stopping.Stop]:
    if spec.strategy == "Hyperband":
        return _hyperband(session, tuning, spec, running)
    # The median rule compares a trial with the completed trials of its own definition
    # (definitions may have other metrics).
    stops: list[stopping.Stop] = []
    for definition in spec.definitions:
        own = [t for t in running if t.definition == definition.name]
        if own:
            stops += _median_rule(session, tuning, definition, own)
    return stops


def _hyperband(
    session: Session, tuning: TuningJob, spec: TuningJobCreate, running: list[TuningTrial]
) -> list[stopping.Stop]:
    """Hyperband's stops, of a tuning job of one training job (as the spec requires)."""
    values = _curves(session, spec.definitions[0], running)
    low, high = spec.hyperband_resources
    decided = stopping.hyperband(
        spec.objective_type,
        spec.random_seed or 0,
        low,
        high,
        [
            stopping.Trial(
                t.number,
                running=t.number in values,
                values=values.get(t.number, ()),
                notes=t.strategy_notes,
            )
            for t in tuning.trials
        ],
    )
    for trial in tuning.trials:
        if trial.number in decided.notes:
            trial.strategy_notes = {**trial.strategy_notes, **decided.notes[trial.number]}
    return decided.stops


def _median_rule(
    session: Session, tuning: TuningJob, definition: Definition, running: list[TuningTrial]
) -> list[stopping.Stop]:
    values = _curves(session, definition, running)
    completed = [
        t
        for t in tuning.trials
        if t.status == "Completed" and t.training_job_id and t.definition == definition.name
    ]
    steps = sorted({len(found) for found in values.values() if found})
    averages = repository.running_averages(
        session,
        [t.training_job_id for t in completed if t.training_job_id],
        definition.objective.metric_name,
        steps,
    )
    return stopping.median_rule(
        definition.objective.type,
        values,
        {t.number: averages[t.training_job_id or ""] for t in completed},
    )


def _curves(
    session: Session, definition: Definition, running: list[TuningTrial]
) -> dict[int, Sequence[float]]:
    """The running trials' objective points so far, by trial number."""
    curves = repository.objective_curves(
        session,
        [t.training_job_id for t in running if t.training_job_id],
        definition.objective.metric_name,
    )
    return {t.number: curves[t.training_job_id or ""] for t in running}


def _trial_ended(
    trial: TuningTrial, status: str, objective: float | None, failure_reason: str | None
) -> None:
    trial.status = status
    trial.ended_at = utcnow()
    # A trial stopped early says why, where SageMaker's summary of a trial has room for it.
    if status == "Stopped" and STOPPED_EARLY in trial.strategy_notes:
        failure_reason = trial.strategy_notes[STOPPED_EARLY]
    trial.failure_reason = failure_reason[:MAX_REASON] if failure_reason else None
    # A trial stopped (by a person, its max_run, or early) still counts with what it
    # reported last, as SageMaker counts an early-stopped training job's.
    if status in ("Completed", "Stopped") and objective is not None:
        trial.objective = objective
        trial.objective_status = "Succeeded"
    else:
        trial.objective_status = "Failed"


def _end_of_trials(tuning: TuningJob, spec: TuningJobCreate) -> None:
    if progress.best(tuning.trials, spec.objective_type) is not None:
        _end(tuning, "Completed")
        return
    metrics = sorted({d.objective.metric_name for d in spec.definitions})
    _end(
        tuning,
        "Failed",
        f"none of the {len(tuning.trials)} training jobs reported the objective metric "
        f"{' or '.join(map(repr, metrics))}",
    )


def _end(tuning: TuningJob, status: str, reason: str | None = None) -> None:
    tuning.status = status
    tuning.failure_reason = reason[:MAX_REASON] if reason else None
    tuning.ended_at = utcnow()
    log.info("tuning job %s %s", tuning.name, status.lower())


def _stop_trial(settings: Settings, name: str, project: str, reason: str) -> None:
    """Stop one trial's training job, in a transaction of its own."""
    tuner = Principal(kind="user", name="tuner", project=project, role=Role.MEMBER)
    try:
        with session_scope(settings.database_url) as session:
            training.stop(session, settings, name, tuner, project, reason=reason)
    except (Conflict, NotFound):
        pass  # it ended (or is gone) meanwhile: the next pass takes that in


class _Refused(Exception):
    """A trial's training job the service refused: recorded as a failed trial."""

    def __init__(self, number: int, name: str, asked: search.Asked, reason: str) -> None:
        super().__init__(reason)
        self.number = number
        self.name = name
        self.asked = asked
        self.reason = reason


def _ask_one(settings: Settings, tuning_job_id: str) -> bool:
    """Step 3, once: whether a trial was asked for (and another may be)."""
    try:
        with session_scope(settings.database_url) as session:
            return _ask_and_submit(session, settings, tuning_job_id)
    except ResourceLimitExceeded as exc:
        # The server refuses jobs over its capacity rather than queueing them: the trial
        # is not asked for now, and the next pass tries again.
        log.info("tuning job %s waits for capacity: %s", tuning_job_id, exc.message)
        return False
    except _Refused as refused:
        with session_scope(settings.database_url) as session:
            return _record_refused(session, tuning_job_id, refused)


def _ask_and_submit(session: Session, settings: Settings, tuning_job_id: str) -> bool:
    tuning = repository.get_by_id(session, tuning_job_id, to_change=True)
    if tuning is None or tuning.status != "InProgress":
        return False
    spec = stored(tuning.spec)
    if not _room(tuning, spec):
        return False
    number = tuning.trials_asked + 1
    asked = _ask(tuning, spec, warm_start.prior(session, tuning, spec))
    trial = TuningTrial(
        number=number,
        name=trial_name(tuning.name, tuning.id, number),
        definition=asked.definition,
        parameters=asked.parameters,
        strategy_notes=asked.notes,
        status="InProgress",
        objective_status="Pending",
        created_at=utcnow(),
    )
    tuning.trials.append(trial)
    tuning.trials_asked = number
    # The trial is recorded (and the tuning job's version checked) before its job is
    # submitted; both commit together or not at all.
    session.flush()
    try:
        job = training.submit(
            session,
            settings,
            trial_spec(spec, spec.definition(asked.definition), trial.name, asked.parameters),
            tuning.project,
            sagemaker_request=trial_request(
                tuning, trial.name, asked.parameters, spec.definition(asked.definition)
            ),
        )
    except ResourceLimitExceeded:
        raise
    except RunyardError as exc:
        raise _Refused(number, trial.name, asked, exc.message) from exc
    trial.training_job_id = job.id
    log.info("tuning job %s: trial %d is training job %s", tuning.name, number, trial.name)
    return True


def _room(tuning: TuningJob, spec: TuningJobCreate) -> bool:
    running = sum(1 for trial in tuning.trials if trial.status in LIVE)
    return (
        tuning.trials_asked < spec.max_trials
        and running < spec.resource_limits.max_parallel_training_jobs
    )


def _ask(tuning: TuningJob, spec: TuningJobCreate, prior: list[search.Earlier]) -> search.Asked:
    earlier = [
        search.Earlier(
            parameters=trial.parameters,
            state=(
                "running"
                if trial.status in LIVE
                else "complete"
                if trial.objective_status == "Succeeded"
                else "failed"
            ),
            objective=trial.objective,
            notes=trial.strategy_notes,
            definition=trial.definition,
        )
        for trial in tuning.trials
    ]
    seed = spec.random_seed if spec.random_seed is not None else 0
    return search.ask(spec, seed, earlier, prior)


def _record_refused(session: Session, tuning_job_id: str, refused: _Refused) -> bool:
    """The refused trial, failed, so that it counts and the search goes on past it."""
    tuning = repository.get_by_id(session, tuning_job_id, to_change=True)
    if tuning is None or tuning.trials_asked != refused.number - 1:
        return False  # another pass went on meanwhile
    now = utcnow()
    tuning.trials.append(
        TuningTrial(
            number=refused.number,
            name=refused.name,
            definition=refused.asked.definition,
            parameters=refused.asked.parameters,
            strategy_notes=refused.asked.notes,
            status="Failed",
            objective_status="Failed",
            failure_reason=refused.reason[:MAX_REASON],
            created_at=now,
            ended_at=now,
        )
    )
    tuning.trials_asked = refused.number
    session.flush()
    log.warning("tuning job %s: trial %d refused: %s", tuning.name, refused.number, refused.reason)
    return True
