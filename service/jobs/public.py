"""A job as a reply shows it (``JobPublic``), built from its row and the record kept for it.

The spec shown is ``job.record``: read as it was stored (``JobRecord.load``), parsed once
while its stored form is the same. Validated again from the stored form as a new spec,
it cost half of what answering a create took in the event loop, and refused a job stored
under older rules (a metric named ``instance/...`` before the prefix was reserved).
"""

from __future__ import annotations

from typing import Any

from service.jobs.models import TrainingJob
from service.jobs.record import JobRecord
from service.jobs.schemas import JobPublic


def public_of(job: TrainingJob, spec: JobRecord | None = None) -> JobPublic:
    """``job`` as a reply shows it; ``spec``: the record to show in place of its own (its
    environment masked for a viewer, say)."""
    return JobPublic.model_validate(_WithSpec(job, job.record if spec is None else spec))


class _WithSpec:
    """A job's attributes as ``JobPublic`` reads them, with ``spec`` the record shown."""

    def __init__(self, job: TrainingJob, spec: JobRecord) -> None:
        self._job = job
        self.spec = spec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._job, name)
