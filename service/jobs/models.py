"""Tables of the jobs domain: a job, its transitions, what each instance reported, and the
metric values read from its log lines.

The metric tables live here rather than in ``service/metrics/`` because the job row links
to its final metrics, and every table must be known to the metadata Alembic compares.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    literal_column,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.jobs.record import JobRecord, record_of
from service.jobs.states import Stage, Status
from service.kit.db import Base, UTCDateTime, utcnow

# SQLite only autoincrements an INTEGER PRIMARY KEY.
BigIntegerPK = BigInteger().with_variant(Integer(), "sqlite")


class TrainingJob(Base):
    __tablename__ = "training_jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    # The job's record (``service.jobs.record``) as JSON: read it through ``record``.
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    backend: Mapped[str] = mapped_column(String(32))

    # Where the job is in its life (service.jobs.lifecycle.Stage), moved only by the
    # lifecycle's events.
    stage: Mapped[str] = mapped_column(String(16), server_default=Stage.QUEUED)
    status: Mapped[str] = mapped_column(String(16), index=True)
    secondary_status: Mapped[str] = mapped_column(String(32))
    failure_reason: Mapped[str | None] = mapped_column(String(1024))
    # Why a Stopping job is stopping: StoppedByUser or MaxRuntimeExceeded.
    stop_reason: Mapped[str | None] = mapped_column(String(32))
    model_artifacts: Mapped[str | None] = mapped_column(Text)

    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    launched_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    training_start_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    training_end_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    stop_signalled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Seconds the instances worked, summed over the attempts that ended: each from its
    # instances' start (their runtime's first report) to its result (service.jobs.billing).
    # Waiting for capacity or a restart is free. What max_run bounds.
    worked_seconds: Mapped[float | None] = mapped_column(Float)
    # BillableTimeInSeconds: the worked seconds billed so far, at the spot price for a
    # spot job (service.jobs.billing); never more than the training time.
    billable_seconds: Mapped[int | None] = mapped_column(Integer)
    # For spot jobs: what the billable seconds saved against on-demand, in percent, as
    # the SageMaker SDK computes it from the billable and the training seconds.
    spot_savings_percent: Mapped[float | None] = mapped_column(Float)

    # For a job created through SageMaker's wire protocol: its CreateTrainingJob request
    # and region, which DescribeTrainingJob echoes (service.sagemaker.translate).
    sagemaker_request: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    # The project it belongs to: who may see it, and whose capacity quota it counts against.
    project: Mapped[str] = mapped_column(String(64), default="default", index=True)
    # Jobs waiting for capacity start in priority order (higher first), then by age: the
    # spec's priority, in a column of its own for the index of the line (below).
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # When the job was given capacity for its instances; None while it queues for it.
    admitted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Why the job waits (capacity, instances starting, a restart's back-off), for people.
    pending_reason: Mapped[str | None] = mapped_column(Text)

    # Restarts: the attempt now running (0 is the first), and how many restarts each kind
    # of failure caused. restart_cause holds why the job is restarting until it has.
    # Spot interruptions are infrastructure restarts too, but max_wait bounds them, not
    # max_infrastructure_restarts: they are counted apart as well.
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    infrastructure_restarts: Mapped[int] = mapped_column(Integer, default=0)
    interruptions: Mapped[int] = mapped_column(Integer, default=0)
    # The first log line number of the current attempt (lines number on across attempts).
    attempt_first_log_seq: Mapped[int] = mapped_column(Integer, default=1)
    restart_cause: Mapped[str | None] = mapped_column(Text)
    # A spot interruption notice for the current attempt (when, and what it said).
    interruption_noticed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    interruption_message: Mapped[str | None] = mapped_column(Text)
    # What keeps the instances apart, as the backend launched them (machine, namespaces,
    # shared); None until they are launched.
    isolation: Mapped[str | None] = mapped_column(String(16))
    # The image the instances run, as the backend launched them (the one the spec names,
    # or one that stands in for it), and why it is not what the job's fields named; None
    # until they are launched.
    launched_image: Mapped[str | None] = mapped_column(String(255))
    launched_image_note: Mapped[str | None] = mapped_column(Text)

    # Progress the script reports (a fraction of 1): the first and the latest value of the
    # current attempt, from which the remaining time is estimated.
    progress_first: Mapped[float | None] = mapped_column(Float)
    progress_first_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    progress: Mapped[float | None] = mapped_column(Float)
    progress_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    # Optimistic concurrency between the API (submit, stop) and the reconciler.
    version: Mapped[int] = mapped_column(Integer, nullable=False)

    transitions: Mapped[list[JobTransition]] = relationship(
        back_populates="job", order_by="JobTransition.id", cascade="all, delete-orphan"
    )
    instances: Mapped[list[JobInstance]] = relationship(
        back_populates="job", order_by="JobInstance.host", cascade="all, delete-orphan"
    )
    lease: Mapped[JobLease] = relationship(cascade="all, delete-orphan", lazy="raise")
    # Written only by metric ingestion (an upsert), so read-only here; loaded only when a
    # job is described, never by the reconciler.
    final_metrics: Mapped[list[JobFinalMetric]] = relationship(
        order_by="JobFinalMetric.name", viewonly=True
    )

    @property
    def estimated_remaining_seconds(self) -> int | None:
        """Seconds until the script's progress reaches 1, at the pace of this attempt
        so far; None until two progress values, or once the job has ended."""
        if (
            self.status != Status.IN_PROGRESS
            or self.progress is None
            or self.progress_first is None
        ):
            return None
        if self.progress_at is None or self.progress_first_at is None:
            return None
        done = self.progress - self.progress_first
        took = (self.progress_at - self.progress_first_at).total_seconds()
        if done <= 0 or took <= 0:
            return None
        remaining = (1 - self.progress) * took / done - (
            utcnow() - self.progress_at
        ).total_seconds()
        return max(0, math.ceil(remaining))

    __mapper_args__ = {"version_id_col": version}
    __table_args__ = (
        Index("ix_training_jobs_created", "created_at", "id"),
        # A project's page of jobs, newest first, and likewise of one status: the list
        # the API and the console show, at any number of jobs.
        Index("ix_training_jobs_project_created", "project", "created_at", "id"),
        Index("ix_training_jobs_project_status_created", "project", "status", "created_at", "id"),
        # Search's default order, the last changed first (service.sagemaker.search).
        Index("ix_training_jobs_project_modified", "project", "updated_at", "id"),
        # The same for a server administrator, across projects.
        Index("ix_training_jobs_status_created", "status", "created_at", "id"),
        Index("ix_training_jobs_admitted", "status", "admitted_at"),
        # A name is unique within its project, as SageMaker's are within an account.
        UniqueConstraint("project", "name", name="uq_training_jobs_project_name"),
    )

    @property
    def record(self) -> JobRecord:
        return record_of(self.id, self.spec)


def record_field(name: str) -> Any:
    """A field of the job's record, read in SQL from the JSON column, for the queries that
    filter or group by it (``.as_string()``, ``.as_integer()``...); only a field the record
    has can be named."""
    if name not in JobRecord.model_fields:
        raise KeyError(f"a job's record has no field {name!r}")
    return TrainingJob.spec[name]


# A job waiting in line for capacity: nothing happens to it until capacity frees, so
# nothing need look at it until then. The stage is written into the SQL, not bound: a
# database uses a partial index (below) only for a query whose conditions it can see imply
# the index's.
IN_LINE = TrainingJob.stage == literal_column(f"'{Stage.QUEUED}'")
# The order of the line: priority (higher first), then age.
LINE_ORDER = (TrainingJob.priority.desc(), TrainingJob.created_at, TrainingJob.id)
# The line in its order: its front is read each time capacity frees and at each sweep,
# whatever the number of jobs waiting.
Index(
    "ix_training_jobs_line",
    *LINE_ORDER,
    postgresql_where=IN_LINE,
    sqlite_where=IN_LINE,
)
# The jobs admitted, holding instances (a few): every job submitted reads them to see
# whether it must wait. A partial index keeps that read to them whatever the number
# waiting, even where the planner's statistics are stale (10,000 jobs waiting were read
# and filtered out, 2.5 ms, until the table had been analyzed).
HELD = TrainingJob.admitted_at.is_not(None)
Index("ix_training_jobs_held", TrainingJob.status, postgresql_where=HELD, sqlite_where=HELD)


class JobLease(Base):
    """Who is reconciling a job. Kept apart from the job row so that taking and renewing
    the lease never looks like a change to the job (version, updated_at)."""

    __tablename__ = "job_leases"

    job_id: Mapped[str] = mapped_column(
        ForeignKey("training_jobs.id", ondelete="CASCADE"), primary_key=True
    )
    owner: Mapped[str | None] = mapped_column(String(64))
    until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Set by anyone who wants another pass while the lease is held; the holder checks it
    # before letting go, so such a request is never lost.
    requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # When beat's safety sweep last re-drove the job while it waited in line: a waiting
    # job is woken by what frees capacity, and swept only now and then, a batch at a time.
    swept_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


# Compared byte by byte on PostgreSQL too (its default collation orders '/' among the
# letters), so a place's range of descendants is one index range on both databases.
# At most MAX_PLACE_KEY characters (service.grants.places), which an index holds.
PlaceKey = Text().with_variant(Text(collation="C"), "postgresql")


class JobWritePlace(Base):
    """A place a job writes: its output folder (``<output_path>/<name>``) or its
    checkpoints, by each of its keys (``service.grants.places.keys``). A job never writes
    where a job of another project writes or wrote, so the row outlives its job: deleting
    a job clears ``job_id`` and keeps the place, unless its artifacts go with it."""

    __tablename__ = "job_write_places"

    id: Mapped[int] = mapped_column(BigIntegerPK, primary_key=True, autoincrement=True)
    job_id: Mapped[str | None] = mapped_column(
        ForeignKey("training_jobs.id", ondelete="SET NULL"), index=True
    )
    project: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(PlaceKey, index=True)


class JobTransition(Base):
    """One secondary-status interval, as in DescribeTrainingJob's SecondaryStatusTransitions."""

    __tablename__ = "job_transitions"

    id: Mapped[int] = mapped_column(BigIntegerPK, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("training_jobs.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16))
    secondary_status: Mapped[str] = mapped_column(String(32))
    start_time: Mapped[datetime] = mapped_column(UTCDateTime)
    end_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    message: Mapped[str] = mapped_column(Text, default="")

    job: Mapped[TrainingJob] = relationship(back_populates="transitions")

    __table_args__ = (Index("ix_job_transitions_job", "job_id", "id"),)


class JobInstance(Base):
    """The latest report of the runtime on one host of a job."""

    __tablename__ = "job_instances"

    id: Mapped[int] = mapped_column(BigIntegerPK, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("training_jobs.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(32))
    phase: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
    exit_code: Mapped[int | None] = mapped_column(Integer)
    failure_reason: Mapped[str | None] = mapped_column(String(1024))
    # Why it failed, a contract.failure_causes.FailureCause's value; None unless Failed.
    failure_cause: Mapped[str | None] = mapped_column(String(32))
    model_uri: Mapped[str | None] = mapped_column(Text)
    # As SageMaker's TrainingStartTime and TrainingEndTime, for this host (the runtime's
    # clock): its first report, and its result (after the model's upload).
    training_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    training_ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When its script ended (its first report of Uploading or of a result): of instances
    # that failed, the one whose script ended first failed first, the others after it.
    script_ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When it first reported Training and Uploading (the runtime's clock): the job's
    # history shows each phase its instances went through, however late a pass looks.
    training_reported_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    uploading_reported_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reported_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    job: Mapped[TrainingJob] = relationship(back_populates="instances")

    __table_args__ = (UniqueConstraint("job_id", "host", name="uq_job_instances_job_host"),)


class MetricPoint(Base):
    """One value of a job's metric, matched by its ``metric_definitions`` in a log line."""

    __tablename__ = "metric_points"

    id: Mapped[int] = mapped_column(BigIntegerPK, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("training_jobs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(32))
    # The seq of the log line it came from: a line yields a metric at most once.
    seq: Mapped[int] = mapped_column(Integer)
    time: Mapped[datetime] = mapped_column(UTCDateTime)
    value: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        UniqueConstraint("job_id", "name", "host", "seq", name="uq_metric_points_line"),
        Index("ix_metric_points_job_name_time", "job_id", "name", "time", "id"),
    )


class MetricRollup(Base):
    """A metric's points of one host within one minute, summed up as they are stored: a
    chart of a week-long job reads 10,080 of these per host instead of 604,800 points."""

    __tablename__ = "metric_rollups"

    job_id: Mapped[str] = mapped_column(
        ForeignKey("training_jobs.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(32), primary_key=True)
    minute: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
    total: Mapped[float] = mapped_column(Float)
    low: Mapped[float] = mapped_column(Float)
    high: Mapped[float] = mapped_column(Float)


class JobFinalMetric(Base):
    """The latest value of each metric of a job (SageMaker's FinalMetricDataList), kept
    apart from the points so describing a job reads one row per metric, and so it
    survives log retention."""

    __tablename__ = "job_final_metrics"

    job_id: Mapped[str] = mapped_column(
        ForeignKey("training_jobs.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    time: Mapped[datetime] = mapped_column(UTCDateTime)
    host: Mapped[str] = mapped_column(String(32))


class MetricCursor(Base):
    """How far a job's metrics have been extracted from one host's lines: lines are stored
    when they arrive and searched after (``service.metrics.extraction``), so a search
    that a crash cut short is taken up again from here, and none is done twice."""

    __tablename__ = "metric_cursors"

    job_id: Mapped[str] = mapped_column(
        ForeignKey("training_jobs.id", ondelete="CASCADE"), primary_key=True
    )
    host: Mapped[str] = mapped_column(String(32), primary_key=True)
    # The host's last line whose points are stored.
    seq: Mapped[int] = mapped_column(Integer, default=0)
    # Set when the host's lines cost the job's patterns more than their budget: its later
    # lines are not searched; why, in words.
    stopped: Mapped[str | None] = mapped_column(String(1024))
