"""SageMaker's Search, over the training jobs of the caller's project: each searched as
SageMaker's ``TrainingJob`` record, DescribeTrainingJob's answer with its ``Tags``, plus
``Metrics.<name>`` for each final metric (``search_expression`` says how a property is
named and compared). The expression is evaluated on the jobs as described, so any
property DescribeTrainingJob answers with can be searched.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from service.auth.access import Principal
from service.jobs.models import TrainingJob
from service.jobs.spec_parts import Tag
from service.jobs.tags import of as tags_of
from service.sagemaker import page_tokens, translate
from service.sagemaker import search_expression as expressions
from service.sagemaker.errors import validation
from service.sagemaker.training import Call, Operation

RESOURCE = "TrainingJob"
DEFAULT_RESULTS = 10
DEFAULT_SORT = "LastModifiedTime"
# SageMaker's limit on the filters, nested filters and subexpressions of one expression.
MAX_TERMS = 50
# What one request may search: the project's newest jobs, this many at most, so that its
# cost does not grow with the project's history (TotalHits then says "at least").
MAX_SEARCHED = 5000


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
    visible = expressions.visibility(params.get("VisibilityConditions") or [])
    sort_by = params.get("SortBy", DEFAULT_SORT)
    expressions.check_property(sort_by, "SortBy")
    descending = params.get("SortOrder", "Descending") == "Descending"
    limit = params.get("MaxResults", DEFAULT_RESULTS)
    digest = page_tokens.digest(params, ("NextToken", "MaxResults"))
    offset = page_tokens.offset_in(
        params, digest, validation("NextToken: not a token this server gave for this search")
    )

    documents, cut = _documents(call)
    found = [doc for doc in documents if visible(doc) and test(doc)]
    found.sort(key=lambda doc: doc["TrainingJobArn"])
    found.sort(key=lambda doc: expressions.sort_key(doc, sort_by), reverse=descending)
    # Jobs without the property come last, whichever the order.
    found.sort(key=lambda doc: not expressions.values(doc, sort_by))
    page = found[offset : offset + limit]
    answer: dict[str, Any] = {
        "Results": [{"TrainingJob": _record(doc)} for doc in page],
        "TotalHits": {
            "Value": len(found),
            "Relation": "GreaterThanOrEqualTo" if cut else "EqualTo",
        },
    }
    if offset + limit < len(found):
        answer["NextToken"] = page_tokens.token(offset + limit, digest)
    return answer


def _documents(call: Call) -> tuple[list[dict[str, Any]], bool]:
    """The newest MAX_SEARCHED jobs of the caller's project as documents, and whether the
    project has more (the search was cut)."""
    principal = call.principal
    if not principal.sees(principal.project):
        return [], False
    query = (
        select(TrainingJob)
        .where(TrainingJob.project == principal.project)
        .order_by(TrainingJob.created_at.desc(), TrainingJob.id.desc())
        .limit(MAX_SEARCHED + 1)
        .options(selectinload(TrainingJob.transitions), selectinload(TrainingJob.final_metrics))
    )
    jobs = list(call.session.scalars(query))
    documents = [_document(job, call.region, principal) for job in jobs[:MAX_SEARCHED]]
    return documents, len(jobs) > MAX_SEARCHED


def _document(job: TrainingJob, region: str, caller: Principal) -> dict[str, Any]:
    # Searched as the caller reads it: a viewer's expression cannot test a masked value.
    described = translate.described(job, region, caller)
    members = expressions.record_members()
    record = {key: value for key, value in described.items() if key in members}
    record["Tags"] = _wire_tags(tags_of(job))
    # Search's own name for the final metrics, beside the record: not part of it.
    return {
        **record,
        "Metrics": {m["MetricName"]: m["Value"] for m in record.get("FinalMetricDataList", [])},
    }


def _record(doc: expressions.Document) -> dict[str, Any]:
    return {key: value for key, value in doc.items() if key != "Metrics"}


def _wire_tags(tags: list[Tag]) -> list[dict[str, str]]:
    return [{"Key": tag.key, "Value": tag.value} for tag in tags]


OPERATIONS: dict[str, Operation] = {"Search": search}
