"""The job an estimator started or attached to: ``estimator.latest_training_job``, with
the SageMaker SDK's ``_TrainingJob`` shape (``name``, ``wait()``, ``describe()``,
``stop()``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from runyard.client import Client, RunyardError
from runyard.output import final_summary, log_line

log = logging.getLogger("runyard")

ENDED = frozenset({"Completed", "Failed", "Stopped"})


class JobFailedError(RunyardError):
    """Waiting for a job saw it end Failed."""

    def __init__(self, job: dict[str, Any]) -> None:
        reason = job.get("failure_reason") or job["secondary_status"]
        super().__init__(f"training job {job['name']} ended {job['status']}: {reason}")
        self.job = job


def shows_logs(logs: bool | str) -> bool:
    """Whether ``logs`` asks for lines: SageMaker's words ("All", "Training", "Rules",
    "None") or a bool, as its ``fit()`` and ``wait()`` take them."""
    return logs not in (False, "None")


class TrainingJob:
    """One training job on the server, by name."""

    def __init__(
        self, client: Client, name: str, description: dict[str, Any] | None = None
    ) -> None:
        self.client = client
        self.name = name
        # The last description read; once the job has ended it no longer changes.
        self._description = description

    @property
    def job_name(self) -> str:
        """The SDK's other name for ``name``."""
        return self.name

    def describe(self) -> dict[str, Any]:
        """The job as the server describes it now (``GET /v1/training-jobs/{name}``)."""
        self._description = self.client.get_job(self.name)
        return self._description

    def latest(self) -> dict[str, Any]:
        """The job's description: the one last read if the job had ended by then, else
        read again."""
        if self._description is not None and self._description["status"] in ENDED:
            return self._description
        return self.describe()

    def wait(
        self, logs: bool | str = "All", *, echo: Callable[[str], None] = print
    ) -> dict[str, Any]:
        """Block until the job ends, printing its lines as they come unless ``logs`` is
        "None" or False, then its summary. A job that ended Failed raises JobFailedError;
        one that was Stopped is only warned of, as the SageMaker SDK does."""
        if shows_logs(logs):
            for item in self.client.follow_logs(self.name):
                if "end" not in item:
                    echo(log_line(item))
        job = self._description = self.client.wait(self.name)
        if shows_logs(logs):
            for line in final_summary(job):
                echo(line)
        if job["status"] == "Stopped":
            log.warning(
                "training job %s ended Stopped rather than Completed (%s): check that it "
                "did what you expected",
                self.name,
                job.get("failure_reason") or job["secondary_status"],
            )
        elif job["status"] != "Completed":
            raise JobFailedError(job)
        return job

    def stop(self) -> dict[str, Any]:
        """Ask the server to stop the job."""
        self._description = self.client.stop_job(self.name)
        return self._description

    def __repr__(self) -> str:
        return f"<TrainingJob {self.name}>"


__all__ = ["JobFailedError", "TrainingJob"]
