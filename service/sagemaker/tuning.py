"""SageMaker's hyperparameter tuning operations, on Runyard's tuning jobs in the caller's
project."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from service.auth.access import Role
from service.jobs.models import TrainingJob
from service.kit import keyset
from service.kit.errors import Conflict, NotFound, SpecError
from service.sagemaker import page_tokens, translate, tuning_translate
from service.sagemaker.errors import AwsError, not_found, validation
from service.sagemaker.training import Call, Operation, keyset_place, keyset_token, request_time
from service.tuning import service, warm_start
from service.tuning.models import TuningJob
from service.tuning.repository import TERMINAL
from service.tuning.schemas import stored

NAME = "HyperParameterTuningJobName"
DEFAULT_PAGE = 10


def create_tuning_job(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    principal = call.principal
    principal.require(Role.MEMBER, principal.project, "creating a hyperparameter tuning job")
    spec = tuning_translate.tuning_spec(params, call.settings.catalog)
    try:
        tuning = service.create(
            call.session,
            call.settings,
            spec,
            principal.project,
            sagemaker_request={
                **translate.recording(params, call.region),
                **tuning_translate.trials_requests(params),
            },
        )
    except SpecError as exc:
        raise tuning_translate.spec_error(exc) from None
    except Conflict:
        raise AwsError(
            "ResourceInUse",
            f"Hyperparameter tuning job names must be unique within a project, and a tuning "
            f"job named {spec.name} already exists.",
        ) from None
    return {"HyperParameterTuningJobArn": tuning_translate.arn(tuning, call.region)}


def describe_tuning_job(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    tuning = _tuning(call, params[NAME])
    overall = warm_start.overall_best(call.session, tuning, stored(tuning.spec))
    return tuning_translate.described(tuning, call.region, overall)


def stop_tuning_job(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    tuning = _tuning(call, params[NAME])
    if tuning.status in TERMINAL:
        raise validation(
            f"The request was rejected because the tuning job is in status {tuning.status}."
        )
    service.stop(call.session, call.settings, tuning.name, call.principal)
    return {}


# ListHyperParameterTuningJobs' orders; the id breaks ties.
_ORDERS = {
    "CreationTime": TuningJob.created_at,
    "Name": TuningJob.name,
    "Status": TuningJob.status,
}
_TIME_RANGES = (
    ("CreationTimeAfter", TuningJob.created_at, True),
    ("CreationTimeBefore", TuningJob.created_at, False),
    ("LastModifiedTimeAfter", TuningJob.updated_at, True),
    ("LastModifiedTimeBefore", TuningJob.updated_at, False),
)


def list_tuning_jobs(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    sort_by = params.get("SortBy", "CreationTime")
    descending = params.get("SortOrder", "Ascending") == "Descending"
    limit = params.get("MaxResults", DEFAULT_PAGE)
    keys = [keyset.Key(_ORDERS[sort_by], descending), keyset.Key(TuningJob.id, descending)]
    query = (
        select(TuningJob)
        .where(TuningJob.project == call.principal.project)
        .options(selectinload(TuningJob.trials))
        .order_by(*keyset.ordering(keys))
    )
    if "StatusEquals" in params:
        query = query.where(TuningJob.status == params["StatusEquals"])
    if "NameContains" in params:
        # Case-insensitive, as SageMaker's; the pattern allows letters, digits and "-".
        query = query.where(TuningJob.name.ilike(f"%{params['NameContains'].lower()}%"))
    for member, column, after in _TIME_RANGES:
        if member in params:
            when = request_time(params[member])
            query = query.where(column > when if after else column < when)
    if "NextToken" in params:
        query = query.where(keyset.after(keys, keyset_place(params["NextToken"], sort_by, keys)))
    found = list(call.session.scalars(query.limit(limit + 1)))
    answer: dict[str, Any] = {
        "HyperParameterTuningJobSummaries": [
            tuning_translate.summary(tuning, call.region) for tuning in found[:limit]
        ]
    }
    if len(found) > limit:
        last = found[limit - 1]
        place = [getattr(last, _ORDERS[sort_by].key), last.id]
        answer["NextToken"] = keyset_token(place, sort_by)
    return answer


def list_training_jobs_for_tuning_job(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """The tuning job's trials, sorted and paged here (a tuning job has at most a few
    hundred)."""
    tuning = _tuning(call, params[NAME])
    spec = stored(tuning.spec)
    region = tuning_translate.region_of(tuning, call.region)
    trials = list(tuning.trials)
    if "StatusEquals" in params:
        trials = [trial for trial in trials if trial.status == params["StatusEquals"]]
    sort_by = params.get("SortBy", "Name")
    descending = params.get("SortOrder", "Ascending") == "Descending"
    if sort_by == "FinalObjectiveMetricValue":
        # Trials without a value come last, whichever the order.
        scored = sorted(
            (t for t in trials if t.objective is not None),
            key=lambda t: (t.objective, t.number),
            reverse=descending,
        )
        trials = scored + [t for t in trials if t.objective is None]
    else:
        key = {
            "Name": lambda t: t.name,
            "CreationTime": lambda t: (t.created_at, t.number),
            "Status": lambda t: (t.status, t.number),
        }[sort_by]
        trials.sort(key=key, reverse=descending)
    digest = page_tokens.digest(params, _NOT_IN_TOKEN)
    refusal = validation("NextToken: not a token this server gave for this listing")
    start = page_tokens.offset_in(params, digest, refusal)
    limit = params.get("MaxResults", DEFAULT_PAGE)
    page = trials[start : start + limit]
    times = _times(call, [trial.training_job_id for trial in page if trial.training_job_id])
    answer: dict[str, Any] = {
        "TrainingJobSummaries": [
            tuning_translate.trial_summary(
                tuning, spec, trial, region, times.get(trial.training_job_id or "")
            )
            for trial in page
        ]
    }
    if start + limit < len(trials):
        answer["NextToken"] = page_tokens.token(start + limit, digest)
    return answer


def _times(call: Call, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    if not job_ids:
        return {}
    rows = call.session.execute(
        select(
            TrainingJob.id, TrainingJob.training_start_time, TrainingJob.training_end_time
        ).where(TrainingJob.id.in_(job_ids))
    )
    return {
        row.id: {
            "TrainingStartTime": row.training_start_time,
            "TrainingEndTime": row.training_end_time,
        }
        for row in rows
    }


# What a token of the trials' listing is good for: the same listing, whatever its page size.
_NOT_IN_TOKEN = ("NextToken", "MaxResults")


def _tuning(call: Call, name: str) -> TuningJob:
    try:
        return service.get(call.session, name, call.principal)
    except NotFound:
        raise not_found() from None


OPERATIONS: dict[str, Operation] = {
    "CreateHyperParameterTuningJob": create_tuning_job,
    "DescribeHyperParameterTuningJob": describe_tuning_job,
    "ListHyperParameterTuningJobs": list_tuning_jobs,
    "ListTrainingJobsForHyperParameterTuningJob": list_training_jobs_for_tuning_job,
    "StopHyperParameterTuningJob": stop_tuning_job,
}
