"""The SDK: an estimator in the shape of the SageMaker Python SDK's.

est = Estimator(entry_point="train.py", source_dir="src", instance_type="local",
                instance_count=2, distribution={"torch_distributed": {"enabled": True}},
                hyperparameters={"epochs": 3})
est.fit({"train": "data/"}, wait=True, logs=True)
print(est.model_data)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runyard.client import Client, RunyardError
from runyard.output import final_summary, log_line


class JobFailedError(RunyardError):
    """fit(wait=True) saw the job end Failed or Stopped."""

    def __init__(self, job: dict[str, Any]) -> None:
        reason = job.get("failure_reason") or job["secondary_status"]
        super().__init__(f"training job {job['name']} ended {job['status']}: {reason}")
        self.job = job


class Estimator:
    def __init__(
        self,
        entry_point: str,
        *,
        instance_type: str,
        instance_count: int = 1,
        source_dir: str | Path | None = None,
        distribution: dict[str, Any] | None = None,
        hyperparameters: dict[str, Any] | None = None,
        base_job_name: str | None = None,
        output_path: str | None = None,
        max_run: int | None = None,
        environment: dict[str, str] | None = None,
        tags: list[dict[str, str]] | None = None,
        backend: str | None = None,
        volume_size: int | None = None,
        metric_definitions: list[dict[str, str]] | None = None,
        checkpoint_s3_uri: str | None = None,
        checkpoint_local_path: str | None = None,
        use_spot_instances: bool = False,
        max_wait: int | None = None,
        max_retry_attempts: int | None = None,
        retry_rules: list[dict[str, Any]] | None = None,
        priority: int | None = None,
        progress_metric: dict[str, Any] | None = None,
        client: Client | None = None,
    ) -> None:
        self.entry_point = entry_point
        self.source_dir = Path(source_dir) if source_dir is not None else None
        self.spec: dict[str, Any] = {
            "instance_type": instance_type,
            "instance_count": instance_count,
            "distribution": distribution or {},
            "hyperparameters": hyperparameters or {},
            "base_job_name": base_job_name,
            "output_path": output_path,
            "max_run": max_run,
            "environment": environment or {},
            "tags": tags or [],
            "backend": backend,
            "volume_size": volume_size,
            "metric_definitions": metric_definitions,
            "checkpoint_s3_uri": checkpoint_s3_uri,
            "checkpoint_local_path": checkpoint_local_path,
            "use_spot_instances": use_spot_instances or None,
            "max_wait": max_wait,
            "max_retry_attempts": max_retry_attempts,
            "retry_rules": retry_rules,
            "priority": priority,
            "progress_metric": progress_metric,
        }
        self.client = client or Client()
        self.latest_training_job: dict[str, Any] | None = None

    def fit(
        self,
        inputs: dict[str, str] | str | None = None,
        *,
        wait: bool = True,
        logs: bool = True,
        job_name: str | None = None,
        echo: Callable[[str], None] = print,
    ) -> dict[str, Any]:
        """Submit the job; with ``wait``, block until it ends (raising JobFailedError unless
        it Completed) and, with ``logs``, print its lines as they come."""
        source_dir, entry_point = self._code()
        spec = {key: value for key, value in self.spec.items() if value is not None}
        spec["entry_point"] = entry_point
        spec["source_uri"] = self.client.upload_source(source_dir)
        if isinstance(inputs, str):
            inputs = {"training": inputs}
        spec["inputs"] = {name: _as_uri(uri) for name, uri in (inputs or {}).items()}
        if job_name:
            spec["name"] = job_name
            spec.pop("base_job_name", None)
        job = self.client.create_job(spec)
        self.latest_training_job = job
        if not wait:
            return job
        if logs:
            for item in self.client.follow_logs(job["name"]):
                if "end" not in item:
                    echo(log_line(item))
        job = self.client.wait(job["name"])
        self.latest_training_job = job
        if logs:
            for line in final_summary(job):
                echo(line)
        if job["status"] != "Completed":
            raise JobFailedError(job)
        return job

    @property
    def model_data(self) -> str | None:
        """URI of the last job's model.tar.gz, once it has completed."""
        return (
            None
            if self.latest_training_job is None
            else self.latest_training_job.get("model_artifacts")
        )

    def _code(self) -> tuple[Path, str]:
        if self.source_dir is not None:
            return self.source_dir, self.entry_point
        # As the SageMaker SDK does without source_dir: ship the entry point's directory.
        script = Path(self.entry_point)
        if not script.is_file():
            raise RunyardError(
                f"entry point {self.entry_point} does not exist (and no source_dir was given)"
            )
        return script.resolve().parent, script.name


def _as_uri(value: str) -> str:
    return value if "://" in value else Path(value).resolve().as_uri()


__all__ = ["Estimator", "JobFailedError"]
