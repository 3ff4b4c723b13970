"""SageMaker's training-job operations, on Runyard's jobs in the caller's project."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from service.auth.access import Principal, Role
from service.jobs import lookup
from service.jobs.models import TrainingJob
from service.kit.errors import (
    Conflict,
    Forbidden,
    NotFound,
    ResourceLimitExceeded,
    RunyardError,
    SpecError,
)
from service.sagemaker import translate
from service.sagemaker.errors import AwsError, not_found, validation
from service.settings import Settings
from service.training import service as jobs


@dataclass(frozen=True)
class Call:
    """One signed call: who makes it, in which region, with which transaction."""

    session: Session
    settings: Settings
    principal: Principal
    region: str


def create_training_job(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    principal = call.principal
    principal.require(Role.MEMBER, principal.project, "creating a training job")
    spec = translate.job_spec(params, call.settings.catalog)
    job = jobs.submit(
        call.session,
        call.settings,
        spec,
        principal.project,
        sagemaker_request=translate.recording(params, call.region),
    )
    return {"TrainingJobArn": translate.arn(job, call.region)}


def describe_training_job(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    return translate.described(_job(call, params["TrainingJobName"]), call.region, call.principal)


def stop_training_job(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = params["TrainingJobName"]
    job = _job(call, name)
    if job.status in ("Completed", "Failed", "Stopped"):
        raise validation(
            f"The request was rejected because the training job is in status {job.status}."
        )
    jobs.stop(call.session, call.settings, name, call.principal)
    return {}


# ListTrainingJobs' sort keys, as columns; ties are broken by the job id.
_SORT_COLUMNS = {
    "CreationTime": TrainingJob.created_at,
    "Name": TrainingJob.name,
    "Status": TrainingJob.status,
}
DEFAULT_PAGE = 10


def list_training_jobs(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    sort_by = params.get("SortBy", "CreationTime")
    descending = params.get("SortOrder", "Ascending") == "Descending"
    limit = params.get("MaxResults", DEFAULT_PAGE)
    column = _SORT_COLUMNS[sort_by]
    query = select(TrainingJob).where(TrainingJob.project == call.principal.project)
    if "NameContains" in params:
        # Case-insensitive, as SageMaker's; the pattern's own wildcards are escaped.
        text = params["NameContains"].lower().replace("\\", "\\\\")
        text = text.replace("%", "\\%").replace("_", "\\_")
        query = query.where(TrainingJob.name.ilike(f"%{text}%", escape="\\"))
    if "StatusEquals" in params:
        query = query.where(TrainingJob.status == params["StatusEquals"])
    for member, column_of, after in (
        ("CreationTimeAfter", TrainingJob.created_at, True),
        ("CreationTimeBefore", TrainingJob.created_at, False),
        ("LastModifiedTimeAfter", TrainingJob.updated_at, True),
        ("LastModifiedTimeBefore", TrainingJob.updated_at, False),
    ):
        if member in params:
            when = _time(params[member])
            query = query.where(column_of > when if after else column_of < when)
    if "NextToken" in params:
        value, job_id = _read_token(params["NextToken"], sort_by)
        beyond = (column < value) if descending else (column > value)
        later_id = (TrainingJob.id < job_id) if descending else (TrainingJob.id > job_id)
        query = query.where(or_(beyond, and_(column == value, later_id)))
    order = (column.desc(), TrainingJob.id.desc()) if descending else (column, TrainingJob.id)
    rows = list(call.session.scalars(query.order_by(*order).limit(limit + 1)))
    answer: dict[str, Any] = {
        "TrainingJobSummaries": [translate.summary(job, call.region) for job in rows[:limit]]
    }
    if len(rows) > limit:
        last = rows[limit - 1]
        answer["NextToken"] = _token(getattr(last, _ATTRIBUTES[sort_by]), last.id, sort_by)
    return answer


_ATTRIBUTES = {"CreationTime": "created_at", "Name": "name", "Status": "status"}


def _token(value: Any, job_id: str, sort_by: str) -> str:
    shown = value.isoformat() if isinstance(value, datetime) else value
    raw = json.dumps([sort_by, shown, job_id]).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _read_token(token: str, sort_by: str) -> tuple[Any, str]:
    try:
        kept_sort, value, job_id = json.loads(base64.urlsafe_b64decode(token.encode()))
        if kept_sort != sort_by or not isinstance(job_id, str) or not isinstance(value, str):
            raise ValueError
        return (datetime.fromisoformat(value) if sort_by == "CreationTime" else value), job_id
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError):
        raise validation(
            "NextToken: not a token this server gave for this listing (same SortBy)"
        ) from None


def _time(epoch_seconds: float) -> datetime:
    try:
        return datetime.fromtimestamp(epoch_seconds, UTC)
    except (OverflowError, OSError, ValueError):
        raise validation("A time is out of range.") from None


def _job(call: Call, name: str) -> TrainingJob:
    try:
        return lookup.get(call.session, name, call.principal)
    except NotFound:
        raise not_found() from None


@contextmanager
def as_aws_errors(name: str) -> Iterator[None]:
    """Runyard's refusals as the errors SageMaker gives for the same cases (``name``: the
    training job the call is about, if any)."""
    try:
        yield
    except SpecError as exc:
        raise validation(f"{translate.member_of(exc.loc)}: {exc.field_message}") from None
    except ResourceLimitExceeded as exc:
        raise AwsError("ResourceLimitExceeded", exc.message) from None
    except Conflict as exc:
        if "already exists" in exc.message:
            raise AwsError(
                "ResourceInUse",
                f"Training job names must be unique within a project, and a training job "
                f"named {name} already exists.",
            ) from None
        raise validation(exc.message) from None
    except NotFound:
        raise not_found() from None
    except Forbidden as exc:
        raise AwsError("AccessDeniedException", exc.message) from None
    except RunyardError as exc:
        raise validation(exc.message) from None


Operation = Callable[[Call, dict[str, Any]], dict[str, Any]]
OPERATIONS: dict[str, Operation] = {
    "CreateTrainingJob": create_training_job,
    "DescribeTrainingJob": describe_training_job,
    "ListTrainingJobs": list_training_jobs,
    "StopTrainingJob": stop_training_job,
}
