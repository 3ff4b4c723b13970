"""What a HyperparameterTuningJob resource's ``status`` says: its tuning job as describe
shows it, in Kubernetes' spelling, with the conditions a TrainingJob's has (``Accepted``,
``Running``, ``Completed``, ``Failed``, ``Stopped``). The model is the status's schema in
the CRD as well."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from service.custom_resources.status import CamelModel, Condition, conditions_for, stamp
from service.tuning.schemas import TuningJobPublic


class TrainingJobCounts(CamelModel):
    completed: int = 0
    in_progress: int = 0
    failed: int = 0
    stopped: int = 0


class BestTrial(CamelModel):
    number: int
    name: str = Field(description="Its training job.")
    objective: float | None = None


class TuningResourceStatus(CamelModel):
    """The resource's status subresource, written by the controller only."""

    tuning_job_id: str | None = Field(default=None, description="The tuning job Runyard runs.")
    project: str | None = None
    status: str | None = Field(
        default=None, description="InProgress, Completed, Failed, Stopping or Stopped."
    )
    failure_reason: str | None = None
    objective: str | None = Field(default=None, description="Its type and metric: Minimize loss.")
    trials_started: int = 0
    trials_ended: int = 0
    max_trials: int | None = Field(default=None, description="How many trials it runs in all.")
    training_jobs: TrainingJobCounts = Field(default_factory=TrainingJobCounts)
    best_trial: BestTrial | None = None
    start_time: str | None = None
    completion_time: str | None = None
    conditions: list[Condition] = Field(default_factory=list)

    def body(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def from_tuning_job(
    tuning: TuningJobPublic, before: TuningResourceStatus, now: datetime
) -> TuningResourceStatus:
    """The status that shows ``tuning``; conditions keep their time while they hold."""
    counts = tuning.training_job_counts
    best = tuning.best_trial
    return TuningResourceStatus(
        tuning_job_id=tuning.id,
        project=tuning.project,
        status=tuning.status,
        failure_reason=tuning.failure_reason,
        objective=tuning.spec.objective_words,
        trials_started=len(tuning.trials),
        trials_ended=counts.completed + counts.failed + counts.stopped,
        max_trials=tuning.max_trials,
        training_jobs=TrainingJobCounts(**counts.model_dump()),
        best_trial=(
            BestTrial(number=best.number, name=best.name, objective=best.objective)
            if best is not None
            else None
        ),
        start_time=stamp(tuning.created_at),
        completion_time=stamp(tuning.ended_at),
        conditions=conditions_for(tuning.status, before.conditions, now),
    )
