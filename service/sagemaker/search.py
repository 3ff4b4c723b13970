"""SageMaker's Search, over the training jobs of the caller's project: each searched as
SageMaker's ``TrainingJob`` record, DescribeTrainingJob's answer with its ``Tags``, plus
``Metrics.<name>`` for each final metric (``search_expression`` says how a property is
named and compared). The expression is evaluated on the jobs as described, so any
property DescribeTrainingJob answers with can be searched.

A request costs about the same whatever the project holds. It walks the project's jobs in
the order asked for (``search_orders``), a few at a time, testing each, and stops once it
has MaxResults results, has looked at MAX_LOOKED_AT jobs, or has read MAX_RECORD_BYTES of
records; a NextToken then goes on from there, as SageMaker's Search may answer fewer
results than asked for with one. A job is read as columns unless the expression names a
property of its record (a tag, a hyperparameter, ...), and the results' records are read
whole only for those answered. (Searching every job at once took 78 s, 23 s of the API's
CPU and 1.6 GiB over 5,000 jobs of 134 KB records.)
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.orm import load_only, raiseload, selectinload

from service.auth.access import Principal
from service.jobs.models import TrainingJob
from service.jobs.spec_parts import Tag
from service.jobs.tags import of as tags_of
from service.kit import keyset
from service.sagemaker import page_tokens, search_orders, translate
from service.sagemaker import search_expression as expressions
from service.sagemaker.errors import validation
from service.sagemaker.training import Call, Operation

RESOURCE = "TrainingJob"
DEFAULT_RESULTS = 10
DEFAULT_SORT = "LastModifiedTime"
# SageMaker's limit on the filters, nested filters and subexpressions of one expression.
MAX_TERMS = 50
# What one request may do before it answers with what it found and a NextToken: look at
# this many jobs, and read this many bytes of records (a job's spec and the request it was
# created with, as stored), whether to test them or to answer with them. A job looked at
# through its columns alone costs about 50 us of the API's CPU; a record of 130 KB about
# 1 ms to read and describe.
MAX_LOOKED_AT = 500
MAX_RECORD_BYTES = 1024 * 1024
# Jobs read at a time: through their columns, or with their records.
COLUMN_BATCH = 100
RECORD_BATCH = 8
# What a job's record costs to read: its JSON as stored, as text.
_RECORD_BYTES = func.length(cast(TrainingJob.spec, Text)) + func.coalesce(
    func.length(cast(TrainingJob.sagemaker_request, Text)), 0
)


@dataclass
class _Budget:
    looked_at: int = 0
    record_bytes: int = 0

    def spent(self) -> bool:
        return self.looked_at >= MAX_LOOKED_AT or self.record_bytes >= MAX_RECORD_BYTES


@dataclass
class _Found:
    job_id: str
    place: list[Any]
    # The job as described, when it was read with its record to be tested.
    document: dict[str, Any] | None


@dataclass
class _Walk:
    """How far a request went: what it found, where it stopped looking, and whether that
    was the end of the project's jobs."""

    place: list[Any] | None
    found: list[_Found] = field(default_factory=list)
    ended: bool = False


def search(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    if params["Resource"] != RESOURCE:
        raise validation(f"Resource: only {RESOURCE} is searched here, not {params['Resource']}")
    expression = params.get("SearchExpression") or {}
    if (terms := expressions.terms(expression)) > MAX_TERMS:
        raise validation(
            f"SearchExpression: {terms} filters, nested filters and subexpressions; "
            f"at most {MAX_TERMS} are allowed"
        )
    test = expressions.compiled(expression, "SearchExpression")
    conditions = params.get("VisibilityConditions") or []
    visible = expressions.visibility(conditions)
    sort_by = params.get("SortBy", DEFAULT_SORT)
    expressions.check_property(sort_by, "SortBy")
    principal = call.principal
    order = search_orders.order(
        sort_by, params.get("SortOrder", "Descending") == "Descending", principal.project
    )
    limit = params.get("MaxResults", DEFAULT_RESULTS)
    digest = page_tokens.digest(params, ("NextToken", "MaxResults"))
    place, hits_before = _read_token(params.get("NextToken"), digest, order)
    if not principal.sees(principal.project):
        return _answer([], None, hits_before, digest)

    tested = expressions.heads(expression)
    reading = _Reading(
        record=bool(tested - _COLUMN_PROPERTIES) or bool(conditions),
        metrics=bool(tested & _METRIC_PROPERTIES),
    )
    budget = _Budget()
    walk = _walk(
        call,
        order,
        place,
        lambda doc: visible(doc) and test(doc),
        limit=limit,
        reading=reading,
        budget=budget,
    )
    answered = walk.found[:limit]
    records, covered = _records(call, answered, budget)
    if covered < len(answered) or len(walk.found) > limit:
        # More were found than answered (the budget ran out reading them, or one beyond
        # the page): the next page starts after the last one answered.
        next_place: list[Any] | None = answered[covered - 1].place
        beyond = True
    else:
        next_place, beyond = (None if walk.ended else walk.place), False
    return _answer(records, next_place, hits_before, digest, more=beyond)


# Search's properties that a job's columns answer: a job is tested on these without its
# record. The metrics come from the final metrics' table.
_METRIC_PROPERTIES = frozenset({"Metrics", "FinalMetricDataList"})
_COLUMN_PROPERTIES = translate.COLUMN_MEMBERS | _METRIC_PROPERTIES


@dataclass(frozen=True)
class _Reading:
    """What a job is read with to be tested: its record, or its columns (and its final
    metrics, where the expression tests them)."""

    record: bool
    metrics: bool


def _walk(
    call: Call,
    order: search_orders.Order,
    place: list[Any] | None,
    matches: expressions.Test,
    *,
    limit: int,
    reading: _Reading,
    budget: _Budget,
) -> _Walk:
    """The jobs after ``place`` in ``order`` that match, up to one more than ``limit``,
    looked at until the budget is spent."""
    walk = _Walk(place=place)
    batch = RECORD_BATCH if reading.record else COLUMN_BATCH
    while len(walk.found) <= limit and not budget.spent():
        size = min(batch, MAX_LOOKED_AT - budget.looked_at)
        rows = call.session.execute(order.window(walk.place).limit(size)).all()
        loaded = _load(call, [row.id for row in rows], reading)
        for row in rows:
            budget.looked_at += 1
            walk.place = order.place_of(row)
            job = loaded.get(row.id)  # None: deleted meanwhile
            document = None if job is None else job.document(call, reading, budget)
            if document is not None and matches(document):
                kept = document if reading.record else None
                walk.found.append(_Found(row.id, walk.place, kept))
            if len(walk.found) > limit or budget.spent():
                return walk
        if len(rows) < size:
            walk.ended = True
            return walk
    return walk


@dataclass(frozen=True)
class _Loaded:
    """A job read as ``reading`` says, its record's bytes (0 without it) not yet counted."""

    job: TrainingJob
    record_bytes: int

    def document(self, call: Call, reading: _Reading, budget: _Budget) -> dict[str, Any]:
        """The job as Search sees it (described whole with its record), its record's
        bytes counted against the budget; let go of by the session, which would keep it
        (and its record) until the request ends."""
        budget.record_bytes += self.record_bytes
        call.session.expunge(self.job)
        if reading.record:
            return _document(self.job, call.region, call.principal)
        document = translate.column_members(self.job)
        if reading.metrics:
            document["FinalMetricDataList"] = translate.final_metrics(self.job)
            document["Metrics"] = _metrics(document["FinalMetricDataList"])
        return document


_WHOLE = _Reading(record=True, metrics=True)


def _load(call: Call, ids: list[str], reading: _Reading) -> dict[str, _Loaded]:
    """The jobs of ``ids``: with their records (and transitions and final metrics), or
    as ``reading`` says, their columns."""
    if not ids:
        return {}
    if reading.record:
        query = select(TrainingJob, _RECORD_BYTES).where(TrainingJob.id.in_(ids))
        query = query.options(
            selectinload(TrainingJob.transitions), selectinload(TrainingJob.final_metrics)
        )
        return {job.id: _Loaded(job, size) for job, size in call.session.execute(query)}
    query = select(TrainingJob).where(TrainingJob.id.in_(ids))
    query = query.options(load_only(*translate.MEMBER_COLUMNS, raiseload=True))
    if reading.metrics:
        query = query.options(selectinload(TrainingJob.final_metrics))
    return {job.id: _Loaded(job, 0) for job in call.session.scalars(query.options(raiseload("*")))}


def _records(call: Call, found: list[_Found], budget: _Budget) -> tuple[list[dict[str, Any]], int]:
    """The records of the jobs found, as many as the budget reads (one at least), and
    how many of ``found`` they cover (a job deleted meanwhile has none)."""
    records: list[dict[str, Any]] = []
    covered = 0
    loaded: dict[str, _Loaded] = {}
    for each in found:
        if records and budget.record_bytes >= MAX_RECORD_BYTES:
            break
        document = each.document
        if document is None:
            if each.job_id not in loaded:
                batch = found[covered : covered + RECORD_BATCH]
                unread = [one.job_id for one in batch if one.document is None]
                loaded = _load(call, unread, _WHOLE)
            job = loaded.get(each.job_id)
            document = None if job is None else job.document(call, _WHOLE, budget)
        if document is not None:
            records.append(_record(document))
        covered += 1
    return records, covered


def _answer(
    records: list[dict[str, Any]],
    next_place: list[Any] | None,
    hits_before: int,
    digest: str,
    *,
    more: bool = False,
) -> dict[str, Any]:
    hits = hits_before + len(records)
    answer: dict[str, Any] = {"Results": [{"TrainingJob": record} for record in records]}
    if next_place is None:
        answer["TotalHits"] = {"Value": hits, "Relation": "EqualTo"}
        return answer
    # At least these: the pages before, this one, and one found beyond it.
    answer["TotalHits"] = {"Value": hits + more, "Relation": "GreaterThanOrEqualTo"}
    answer["NextToken"] = _token(next_place, digest, hits)
    return answer


def _token(place: list[Any], digest: str, hits: int) -> str:
    raw = json.dumps([digest, keyset.to_json(place), hits]).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _read_token(
    token: str | None, digest: str, order: search_orders.Order
) -> tuple[list[Any] | None, int]:
    """Where a request goes on from, and how many results the pages before it held: a
    token this server gave for the same search (whatever its MaxResults), else refused."""
    if token is None:
        return None, 0
    try:
        kept_digest, kept_place, hits = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError, binascii.Error):
        raise _refused_token() from None
    place = keyset.from_json(order.keys, kept_place)
    if kept_digest != digest or place is None or not isinstance(hits, int) or hits < 0:
        raise _refused_token()
    return place, hits


def _refused_token() -> Exception:
    return validation("NextToken: not a token this server gave for this search")


def _document(job: TrainingJob, region: str, caller: Principal) -> dict[str, Any]:
    # Searched as the caller reads it: a viewer's expression cannot test a masked value.
    described = translate.described(job, region, caller)
    members = expressions.record_members()
    record = {key: value for key, value in described.items() if key in members}
    record["Tags"] = _wire_tags(tags_of(job))
    # Search's own name for the final metrics, beside the record: not part of it.
    return {**record, "Metrics": _metrics(record.get("FinalMetricDataList", []))}


def _metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    return {metric["MetricName"]: metric["Value"] for metric in metrics}


def _record(doc: expressions.Document) -> dict[str, Any]:
    return {key: value for key, value in doc.items() if key != "Metrics"}


def _wire_tags(tags: list[Tag]) -> list[dict[str, str]]:
    return [{"Key": tag.key, "Value": tag.value} for tag in tags]


OPERATIONS: dict[str, Operation] = {"Search": search}
