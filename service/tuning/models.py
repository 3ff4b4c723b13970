"""Tables of the tuning domain: a tuning job, and each trial it asked for.

The tuner's whole state is here: which trials were asked, with which parameters (and the
search strategy's own notes on them), the training job each became, and its objective.
A tuner that restarts rebuilds its search from these rows alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.kit.db import Base, UTCDateTime, utcnow

# SQLite only autoincrements an INTEGER PRIMARY KEY.
BigIntegerPK = BigInteger().with_variant(Integer(), "sqlite")


class TuningJob(Base):
    __tablename__ = "tuning_jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(32))
    project: Mapped[str] = mapped_column(String(64))
    # The tuning job as it was created (``service.tuning.schemas.TuningJobCreate``), its
    # random seed decided: read it through ``service.tuning.schemas.stored``.
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    strategy: Mapped[str] = mapped_column(String(16))
    # InProgress, Completed, Failed, Stopping or Stopped, as SageMaker's.
    status: Mapped[str] = mapped_column(String(16))
    failure_reason: Mapped[str | None] = mapped_column(String(1024))
    # For a tuning job created through SageMaker's wire: its request and region, echoed
    # by DescribeHyperParameterTuningJob.
    sagemaker_request: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # How many trials have been asked for: each ask writes it, so two tuners that asked
    # at once find out (the version below) and one of them starts over.
    trials_asked: Mapped[int] = mapped_column(Integer, default=0)
    version: Mapped[int] = mapped_column(Integer, nullable=False)

    trials: Mapped[list[TuningTrial]] = relationship(
        back_populates="tuning_job", order_by="TuningTrial.number", cascade="all, delete-orphan"
    )

    __mapper_args__ = {"version_id_col": version}
    __table_args__ = (
        # A name is unique within its project, as SageMaker's are within an account.
        UniqueConstraint("project", "name", name="uq_tuning_jobs_project_name"),
        # A project's page of tuning jobs, newest first.
        Index("ix_tuning_jobs_project_created", "project", "created_at", "id"),
        # The sweep's read of the live tuning jobs.
        Index("ix_tuning_jobs_status", "status"),
    )


class TuningTrial(Base):
    """One trial: the parameters asked for, and the training job that tried them."""

    __tablename__ = "tuning_trials"

    id: Mapped[int] = mapped_column(BigIntegerPK, primary_key=True, autoincrement=True)
    tuning_job_id: Mapped[str] = mapped_column(ForeignKey("tuning_jobs.id", ondelete="CASCADE"))
    # 1 for the first trial; in the training job's name (<tuning job>-001-<hash>).
    number: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(63))
    # Of a tuning job of several training job definitions, the one this trial ran
    # (None for a tuning job of one training job).
    definition: Mapped[str | None] = mapped_column(String(64))
    # The tuned hyperparameters' values, as the script gets them.
    parameters: Mapped[dict[str, Any]] = mapped_column(JSON)
    # What the search strategy noted on the trial when it asked (Optuna's system
    # attributes), given back to it whenever the search is rebuilt.
    strategy_notes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # None where the training job was refused (then the trial is Failed), or deleted since.
    training_job_id: Mapped[str | None] = mapped_column(
        ForeignKey("training_jobs.id", ondelete="SET NULL"), index=True
    )
    # The training job's status as the tuner last saw it.
    status: Mapped[str] = mapped_column(String(16))
    # The objective metric's final value, once the training job has ended with one.
    objective: Mapped[float | None] = mapped_column(Float)
    # Pending while the training job runs, then Succeeded or Failed (no objective).
    objective_status: Mapped[str] = mapped_column(String(16))
    failure_reason: Mapped[str | None] = mapped_column(String(1024))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    tuning_job: Mapped[TuningJob] = relationship(back_populates="trials")

    __table_args__ = (UniqueConstraint("tuning_job_id", "number", name="uq_tuning_trials_number"),)
