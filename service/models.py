"""Every table, imported in one place so the metadata (and Alembic) sees them all."""

from service.auth.models import ApiToken, ConsoleSession, Project
from service.jobs.models import JobInstance, JobLease, JobTransition, TrainingJob
from service.kit.db import Base
from service.logs.models import LogEvent

__all__ = [
    "ApiToken",
    "Base",
    "ConsoleSession",
    "JobInstance",
    "JobLease",
    "JobTransition",
    "LogEvent",
    "Project",
    "TrainingJob",
]
