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

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.auth.access import Principal, Role
from service.jobs import lookup
from service.jobs.models import TrainingJob
from service.kit import keyset, scan
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


# ListTrainingJobs' orders, each that of an index of the project's jobs; the job id breaks
# ties.
_ORDERS = {
    "CreationTime": (TrainingJob.created_at,),
    "Name": (TrainingJob.name,),
    "Status": (TrainingJob.status, TrainingJob.created_at),
}
DEFAULT_PAGE = 10
# The time ranges a listing may ask for: the column each bounds, and from which side.
_TIME_RANGES = (
    ("CreationTimeAfter", TrainingJob.created_at, True),
    ("CreationTimeBefore", TrainingJob.created_at, False),
    ("LastModifiedTimeAfter", TrainingJob.updated_at, True),
    ("LastModifiedTimeBefore", TrainingJob.updated_at, False),
)


def list_training_jobs(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """A page of the project's jobs as summaries, read as columns (never their records).
    The filters the order's index answers are read through it; the others are tested on a
    window of the order (``service.kit.scan``), so a page may hold fewer than MaxResults
    jobs, and still a NextToken, as SageMaker's may."""
    sort_by = params.get("SortBy", "CreationTime")
    descending = params.get("SortOrder", "Ascending") == "Descending"
    limit = params.get("MaxResults", DEFAULT_PAGE)
    keys = [keyset.Key(column, descending) for column in (*_ORDERS[sort_by], TrainingJob.id)]
    sought, tested = _filters(params, sort_by)
    window = (
        select(TrainingJob.id, *_ORDERS[sort_by])
        .where(TrainingJob.project == call.principal.project, *sought)
        .order_by(*keyset.ordering(keys))
    )
    if "NextToken" in params:
        window = window.where(keyset.after(keys, keyset_place(params["NextToken"], sort_by, keys)))
    if tested:
        rows, last = scan.page_of_window(
            call.session,
            window,
            lambda ids: select(*_SUMMARY_COLUMNS).where(TrainingJob.id.in_(ids), *tested),
            limit=limit,
        )
    else:
        found = call.session.execute(
            window.with_only_columns(*_SUMMARY_COLUMNS).limit(limit + 1)
        ).all()
        rows, last = list(found[:limit]), (found[limit - 1] if len(found) > limit else None)
    answer: dict[str, Any] = {
        "TrainingJobSummaries": [translate.summary(row, call.region) for row in rows]
    }
    if last is not None:
        place = [getattr(last, column.key) for column in (*_ORDERS[sort_by], TrainingJob.id)]
        answer["NextToken"] = keyset_token(place, sort_by)
    return answer


# What a summary shows (``translate.summary``), as columns: the region a job was created in
# read out of its recorded request by the database, never the request itself.
_SUMMARY_COLUMNS = (
    TrainingJob.id,
    TrainingJob.name,
    TrainingJob.project,
    TrainingJob.created_at,
    TrainingJob.updated_at,
    TrainingJob.status,
    TrainingJob.secondary_status,
    TrainingJob.training_end_time,
    translate.RECORDED_REGION.label("region"),
)


def _filters(params: dict[str, Any], sort_by: str) -> tuple[list[Any], list[Any]]:
    """The listing's filters: those the index of ``sort_by``'s order answers (a status,
    and by creation time a creation window), and those tested row by row."""
    sought: list[Any] = []
    tested: list[Any] = []
    if "StatusEquals" in params:
        in_index = sort_by in ("CreationTime", "Status")
        (sought if in_index else tested).append(TrainingJob.status == params["StatusEquals"])
    if "NameContains" in params:
        # Case-insensitive, as SageMaker's; the pattern's own wildcards are escaped.
        text = params["NameContains"].lower().replace("\\", "\\\\")
        text = text.replace("%", "\\%").replace("_", "\\_")
        tested.append(TrainingJob.name.ilike(f"%{text}%", escape="\\"))
    for member, column, after in _TIME_RANGES:
        if member in params:
            when = request_time(params[member])
            in_index = column is TrainingJob.created_at and sort_by == "CreationTime"
            (sought if in_index else tested).append(column > when if after else column < when)
    return sought, tested


def keyset_token(place: list[Any], sort_by: str) -> str:
    """A listing's NextToken when paged by keys: the order it was given for and the last
    row's keys (``place``, as the order's columns hold them)."""
    raw = json.dumps([sort_by, keyset.to_json(place)]).encode()
    return base64.urlsafe_b64encode(raw).decode()


def keyset_place(token: str, sort_by: str, keys: list[keyset.Key]) -> list[Any]:
    """The keys a ``keyset_token`` holds; refused unless this server gave it for a listing
    in ``sort_by``'s order."""
    place = None
    try:
        kept_sort, kept_place = json.loads(base64.urlsafe_b64decode(token.encode()))
        if kept_sort == sort_by:
            place = keyset.from_json(keys, kept_place)
    except (ValueError, TypeError, binascii.Error):
        pass
    if place is None:
        raise validation("NextToken: not a token this server gave for this listing (same SortBy)")
    return place


def request_time(epoch_seconds: float) -> datetime:
    """A time a request gives in seconds since the epoch; refused where out of range."""
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
