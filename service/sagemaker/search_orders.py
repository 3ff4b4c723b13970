"""The orders SageMaker's Search answers training jobs in, each read off an index of the
project's jobs (or, by a final metric, off the metrics' own table) so that a request reads
the jobs it looks at in order, a few at a time, and never sorts the project's jobs itself.

A property not kept in a column of its own (a hyperparameter, the instance type) could be
sorted by only after reading every job's record: Search refuses it, naming those it sorts
by, rather than answer some of the project's jobs out of order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, select

from service.jobs.models import JobFinalMetric, TrainingJob
from service.kit import keyset
from service.kit.scan import Query
from service.sagemaker.errors import validation

# SortBy's properties kept in columns, each with the columns of its index; the job id
# breaks ties.
_COLUMNS = {
    "CreationTime": (TrainingJob.created_at,),
    "LastModifiedTime": (TrainingJob.updated_at,),
    "TrainingJobName": (TrainingJob.name,),
    "TrainingJobStatus": (TrainingJob.status, TrainingJob.created_at),
}
_METRIC = "Metrics."
SORTABLE = ", ".join([*_COLUMNS, f"{_METRIC}<name>"])


@dataclass(frozen=True)
class Order:
    """The project's jobs in one order: ``window(place)`` selects the ids of the jobs
    after ``place`` (all of them for None), in order, with their place (``place_of``)."""

    keys: tuple[keyset.Key, ...]
    base: Query

    def window(self, place: list[Any] | None) -> Query:
        query = self.base.order_by(*keyset.ordering(self.keys))
        return query if place is None else query.where(keyset.after(self.keys, place))

    def place_of(self, row: Any) -> list[Any]:
        return [getattr(row, f"k{index}") for index in range(len(self.keys))]


def order(sort_by: str, descending: bool, project: str) -> Order:
    """Jobs of ``project`` by ``sort_by``; a property without an index is refused."""
    if sort_by in _COLUMNS:
        columns: tuple[Any, ...] = (*_COLUMNS[sort_by], TrainingJob.id)
        keys = tuple(keyset.Key(column, descending) for column in columns)
        base = select(TrainingJob.id, *_labelled(keys))
    elif sort_by.startswith(_METRIC) and len(sort_by) > len(_METRIC):
        # Jobs without the metric last, whichever the order, as SageMaker's.
        keys = (
            keyset.Key(JobFinalMetric.value, descending, nullable=True),
            keyset.Key(TrainingJob.id, descending),
        )
        base = select(TrainingJob.id, *_labelled(keys)).outerjoin(
            JobFinalMetric,
            and_(
                JobFinalMetric.job_id == TrainingJob.id,
                JobFinalMetric.name == sort_by[len(_METRIC) :],
            ),
        )
    else:
        raise validation(f"SortBy: training jobs are sorted by {SORTABLE}, not {sort_by!r}")
    return Order(keys, base.where(TrainingJob.project == project))


def _labelled(keys: tuple[keyset.Key, ...]) -> list[Any]:
    return [key.column.label(f"k{index}") for index, key in enumerate(keys)]
