"""SageMaker's ListTags, AddTags and DeleteTags, on training jobs named by their ARNs.

The tags are the job's own (``service.jobs.tags``): what these change, the REST API and
the console show. Reading needs to see the job's project; changing needs the role that
may change its jobs (member).
"""

from __future__ import annotations

from typing import Any

from service.auth.access import Role
from service.jobs import lookup, tags
from service.jobs.models import TrainingJob
from service.jobs.spec_parts import Tag
from service.kit.errors import NotFound
from service.sagemaker import translate
from service.sagemaker.errors import not_found, validation
from service.sagemaker.training import Call, Operation

# AWS keeps tag keys with this prefix for itself.
RESERVED_PREFIX = "aws:"


def list_tags(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """The tags of a training job (the SDK's Estimator.attach reads them)."""
    return {"Tags": _wire(tags.of(job_of_arn(call, params["ResourceArn"])))}


def add_tags(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    given = [(tag["Key"], tag["Value"]) for tag in params["Tags"]]
    seen: set[str] = set()
    for index, (key, _value) in enumerate(given, start=1):
        if key.lower().startswith(RESERVED_PREFIX):
            raise validation(
                f"Tags.{index}.Key: keys starting with {RESERVED_PREFIX!r} are reserved"
            )
        if key in seen:
            raise validation(f"Tags.{index}.Key: the key {key!r} is given twice")
        seen.add(key)
    job = _job_to_change(call, params["ResourceArn"], "tagging a training job")
    return {"Tags": _wire(tags.add(call.session, job, given))}


def delete_tags(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    job = _job_to_change(call, params["ResourceArn"], "untagging a training job")
    tags.remove(call.session, job, params["TagKeys"])
    return {}


def job_of_arn(call: Call, resource_arn: str, *, to_change: bool = False) -> TrainingJob:
    """The caller's training job that ``resource_arn`` names; a job of another project,
    or an ARN that is not this job's, is not found, as from SageMaker."""
    prefix, _, name = resource_arn.rpartition(":training-job/")
    if not prefix:
        raise validation("ResourceArn: only training jobs' ARNs are served here")
    try:
        job = lookup.get(call.session, name, call.principal, to_change=to_change)
    except NotFound:
        raise not_found() from None
    # The job's ARN names the region it was created in (or, made through Runyard's own
    # API, the caller's): an ARN of another region or account is another job.
    if translate.job_arn(job, call.region) != resource_arn:
        raise not_found()
    return job


def _job_to_change(call: Call, resource_arn: str, action: str) -> TrainingJob:
    # The role first: a caller who may not change the project's jobs locks none of them.
    call.principal.require(Role.MEMBER, call.principal.project, action)
    return job_of_arn(call, resource_arn, to_change=True)


def _wire(found: list[Tag]) -> list[dict[str, str]]:
    return [{"Key": tag.key, "Value": tag.value} for tag in found]


OPERATIONS: dict[str, Operation] = {
    "ListTags": list_tags,
    "AddTags": add_tags,
    "DeleteTags": delete_tags,
}
