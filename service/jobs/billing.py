"""A job's training and billable seconds, as SageMaker defines them.

DescribeTrainingJob's TrainingTimeInSeconds is TrainingEndTime minus TrainingStartTime,
the time the job ran on its instances (from their start, downloads included, to their
result, the model's upload included) together with any wait between attempts.
BillableTimeInSeconds is the part of it billed: the seconds the attempts' instances worked,
at the spot price for a spot job, expressed as on-demand seconds. The SageMaker SDK prints
a spot job's savings as ``(1 - billable / training) * 100``, so both are whole seconds,
cut the same way, and billable never exceeds training.
"""

from __future__ import annotations

from datetime import datetime


def training_seconds(start: datetime, end: datetime) -> int:
    """TrainingTimeInSeconds: whole seconds, and at least one for a job that started."""
    return max(1, int((end - start).total_seconds()))


def billable_seconds(worked_seconds: float, spot_price_ratio: float | None) -> int:
    """BillableTimeInSeconds for a job whose instances started and worked
    ``worked_seconds``: at the spot price's share of on-demand's for a spot job
    (``spot_price_ratio``; None on demand), cut to whole seconds as the training time is,
    and at least one, as it is. On demand, a job of one attempt is billed its training
    time. The worked time is cut to whole seconds before the share is taken, as the
    training time is: a spot job then saves at least the spot price's share of the
    training time (13.9 s worked of 13.9 s: 3 of 13 billed, not 4)."""
    share = 1.0 if spot_price_ratio is None else spot_price_ratio
    return max(1, int(int(max(0.0, worked_seconds)) * share))


def spot_savings_percent(billable: int, training: int) -> float:
    """What the SageMaker SDK prints as "Managed Spot Training savings", to its one
    decimal."""
    return round((1 - float(billable) / training) * 100, 1)
