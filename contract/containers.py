"""What the runtime and the local backend agree on about custom containers: the labels a
job's containers carry, by which the backend finds and removes whatever a job left, and
their names (one per instance and attempt, so a retried start replaces its own)."""

from __future__ import annotations

LABEL_JOB_ID = "runyard.job-id"
LABEL_HOST = "runyard.host"


def container_name(job_id: str, host: str, attempt: int) -> str:
    return f"runyard-{job_id}-{host}-{attempt}"
