"""Billing an attempt: how long its instances worked, from their start to its result.

An attempt's instances work from their runtime's first report (SageMaker's
TrainingStartTime: before the downloads) to the attempt's result: the last instance's
final report when every instance sent one (after the model's upload), else the moment the
reconciler decided the attempt was over (SageMaker's end of a failed job: when the failure
was detected). Neither launching the instances nor tearing them down is billed, and
neither is the wait before a restart. The job's billable seconds are the worked seconds
of its attempts, priced by ``service.jobs.billing``, never more than its training time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from contract.phases import FINAL_PHASES
from service.jobs.billing import billable_seconds
from service.jobs.models import TrainingJob
from worker.reconciler.snapshot import JobSnapshot, Report


@dataclass(frozen=True)
class Worked:
    """When an attempt's instances started, and when its result came."""

    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def attempt_worked(
    hosts: list[str], reports: dict[str, Report], decided_at: datetime
) -> Worked | None:
    """What the attempt reported in ``reports`` worked; None if no instance started."""
    started = [r.training_started_at for r in reports.values() if r.training_started_at]
    if not started:
        return None
    start = min(started)
    results = [
        report.training_ended_at
        for host in hosts
        if (report := reports.get(host)) is not None and report.phase in FINAL_PHASES
    ]
    every_result = [at for at in results if at is not None]
    end = max(every_result) if len(every_result) == len(hosts) else decided_at
    # An instance's clock may be behind the service's: an attempt never lasts less than
    # nothing.
    return Worked(start, max(start, end))


def working_seconds(snapshot: JobSnapshot, reports: dict[str, Report], now: datetime) -> float:
    """Seconds the job's instances have worked by ``now``, its earlier attempts included:
    what max_run bounds. The current attempt counts from its launch until an instance
    reports, so one that never does is bounded too."""
    started = [r.training_started_at for r in reports.values() if r.training_started_at]
    since = min(started) if started else snapshot.launched_at or now
    return snapshot.worked_seconds + max(0.0, (now - since).total_seconds())


def spot_price_ratio(snapshot: JobSnapshot, ratio: float) -> float | None:
    """The share of the on-demand price the job pays: ``ratio`` on spot, None on demand."""
    return ratio if snapshot.spec.use_spot_instances else None


def bill_attempt(
    job: TrainingJob, worked: Worked | None, ended_at: datetime, price_ratio: float | None
) -> None:
    """Add the attempt's worked time to the job's, once (the attempt is then over), and
    bill what the job worked so far. ``ended_at``: when the attempt ended."""
    if job.launched_at is None:
        return  # billed already
    job.launched_at = None
    if worked is not None and job.training_start_time is None:
        job.training_start_time = worked.start
    job.worked_seconds = (job.worked_seconds or 0.0) + (worked.seconds if worked else 0.0)
    if job.training_start_time is None:
        job.billable_seconds = 0  # no instance ever started
        return
    # Attempts follow each other within the training time; should the instances' clocks
    # and the service's disagree, billable still never exceeds it.
    billed = min(job.worked_seconds, (ended_at - job.training_start_time).total_seconds())
    job.billable_seconds = billable_seconds(billed, price_ratio)
