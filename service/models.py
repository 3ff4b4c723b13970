"""Every table, imported in one place so the metadata (and Alembic) sees them all."""

from service.auth.models import ApiToken, ConsoleSession, Project
from service.grants.models import ProjectGrant
from service.jobs.models import JobInstance, JobLease, JobTransition, JobWritePlace, TrainingJob
from service.kit.db import Base
from service.logs.models import LogChunk
from service.tuning.models import TuningJob, TuningTrial

__all__ = [
    "ApiToken",
    "Base",
    "ConsoleSession",
    "JobInstance",
    "JobLease",
    "JobTransition",
    "JobWritePlace",
    "LogChunk",
    "Project",
    "ProjectGrant",
    "TrainingJob",
    "TuningJob",
    "TuningTrial",
]
