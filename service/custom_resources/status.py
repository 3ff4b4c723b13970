"""What a TrainingJob resource's ``status`` says: its job as ``describe`` shows it, in
Kubernetes' spelling (camelCase, conditions in the API conventions' shape).

Conditions: ``Accepted`` (the job was submitted; False, with reason ``Invalid`` or
``NameTaken``, when it was refused, the message naming the field), ``Running``,
``Completed``, ``Failed`` and ``Stopped`` (each True once the job is in it). The model is
the status's schema in the CRD as well.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from service.jobs.schemas import JobPublic
from service.jobs.states import Status

CONDITION_TYPES = ("Accepted", "Running", "Completed", "Failed", "Stopped")
# Which condition each of a job's statuses makes True (Stopping is still running).
_TRUE_IN = {
    Status.IN_PROGRESS: "Running",
    Status.STOPPING: "Running",
    Status.COMPLETED: "Completed",
    Status.FAILED: "Failed",
    Status.STOPPED: "Stopped",
}


class CamelModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Condition(CamelModel):
    type: str
    status: str = Field(description="True, False or Unknown.")
    reason: str
    message: str = ""
    last_transition_time: str


class InstanceState(CamelModel):
    host: str
    phase: str
    exit_code: int | None = None
    message: str = ""


class FinalMetric(CamelModel):
    name: str
    value: float


class ResourceStatus(CamelModel):
    """The resource's status subresource, written by the controller only."""

    job_id: str | None = Field(default=None, description="The job Runyard runs for it.")
    project: str | None = None
    status: str | None = Field(
        default=None, description="InProgress, Completed, Failed, Stopping or Stopped."
    )
    secondary_status: str | None = None
    reason: str | None = Field(
        default=None, description="Why it is in its secondary status (the latest transition's)."
    )
    failure_reason: str | None = None
    pending_reason: str | None = None
    instances: list[InstanceState] = Field(default_factory=list)
    model_artifacts: str | None = None
    final_metrics: list[FinalMetric] = Field(default_factory=list)
    start_time: str | None = None
    completion_time: str | None = None
    duration: str | None = Field(
        default=None,
        description="From the start of training to its end, or to the last change while it runs.",
    )
    conditions: list[Condition] = Field(default_factory=list)
    events_recorded: int = Field(
        default=0, description="How many of the job's transitions were posted as Events."
    )

    def body(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def from_job(job: JobPublic, before: ResourceStatus, now: datetime) -> ResourceStatus:
    """The status that shows ``job``; conditions keep their time while they hold."""
    latest = job.transitions[-1] if job.transitions else None
    started = job.training_start_time
    ended = job.ended_at
    return ResourceStatus(
        job_id=job.id,
        project=job.project,
        status=job.status,
        secondary_status=job.secondary_status,
        reason=latest.message if latest is not None else None,
        failure_reason=job.failure_reason,
        pending_reason=job.pending_reason,
        instances=[
            InstanceState(
                host=row.host, phase=row.phase, exit_code=row.exit_code, message=row.message
            )
            for row in sorted(job.instances, key=lambda row: row.host)
        ],
        model_artifacts=job.model_artifacts,
        final_metrics=[FinalMetric(name=m.name, value=m.value) for m in job.final_metrics],
        start_time=stamp(started),
        completion_time=stamp(ended),
        duration=duration_text(started, ended or now) if started is not None else None,
        conditions=conditions_for(job.status, before.conditions, now),
        events_recorded=before.events_recorded,
    )


def refused(before: ResourceStatus, reason: str, message: str, now: datetime) -> ResourceStatus:
    """A resource whose job was not submitted: why, as its Accepted condition."""
    accepted = set_condition(before.conditions, "Accepted", False, reason, message, now)
    return before.model_copy(update={"conditions": accepted})


def set_condition(
    conditions: list[Condition], kind: str, true: bool, reason: str, message: str, now: datetime
) -> list[Condition]:
    """``conditions`` with ``kind`` set; its time changes only when its status does."""
    value = "True" if true else "False"
    found = next((c for c in conditions if c.type == kind), None)
    since = found.last_transition_time if found is not None and found.status == value else None
    changed = Condition(
        type=kind,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=since or stamp(now) or "",
    )
    return [changed if c.type == kind else c for c in conditions] + ([] if found else [changed])


def conditions_for(status: str, before: list[Condition], now: datetime) -> list[Condition]:
    """Accepted, and the one of Running, Completed, Failed and Stopped that ``status``
    (a job's or a tuning job's: they share their statuses) makes True."""
    conditions = set_condition(before, "Accepted", True, "Submitted", "", now)
    holding = _TRUE_IN.get(Status(status))
    for kind in CONDITION_TYPES[1:]:
        true = kind == holding
        reason = status if true else f"Not{kind}"
        conditions = set_condition(conditions, kind, true, reason, "", now)
    return conditions


def stamp(value: datetime | None) -> str | None:
    """A time as Kubernetes writes it in a status."""
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def duration_text(start: datetime, end: datetime) -> str:
    """As kubectl writes durations: 45s, 3m12s, 2h5m."""
    seconds = max(0, int((end - start).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{seconds}s"
    return f"{seconds}s"
