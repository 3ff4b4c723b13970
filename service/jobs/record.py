"""The job as the server keeps it: the ``spec`` column of a ``TrainingJob``, typed.

A request (``service.jobs.schemas.JobCreate``) becomes a record once, when the job is
accepted (``JobCreate.to_record``), with what the server chose for it: its name, backend,
output path, image and the distribution's hyperparameters. Everything after that (the
worker, the SageMaker endpoint, the metrics, the instances' credentials) reads the record,
never the request: a rule added to the request since must not change what a stored job
runs, so ``JobRecord.load`` checks the record's shape and none of the request's rules.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Literal, Self

from cachetools import LRUCache
from pydantic import ConfigDict, Field

from contract import images
from contract.spec import Channel as ChannelSpec
from contract.spec import JobSpec
from service.jobs.spec_parts import (
    MAX_CONTAINER_WORDS,
    MAX_METRIC_DEFINITIONS,
    MAX_RETRY_ATTEMPTS,
    MAX_RETRY_RULES,
    MAX_RUN_LIMIT,
    MAX_TAGS,
    NAME_SCHEMA,
    STORED,
    Channel,
    ContainerWord,
    Distribution,
    ImageChoice,
    MetricDefinition,
    ProgressMetric,
    RetryRule,
    Strict,
    Tag,
)
from service.kit.integers import INT32_MAX


class JobFields(Strict):
    """The fields of a job's spec, as the SageMaker estimator names them: what the request
    and the record share, with the bounds every stored value is within."""

    name: str | None = Field(default=None, json_schema_extra=NAME_SCHEMA)
    # Both, unless a container entry point runs instead (it brings its own code).
    entry_point: str | None = Field(default=None, min_length=1, max_length=256)
    source_uri: str | None = Field(default=None, min_length=1, max_length=1024)
    # SageMaker picks the framework by estimator class; Runyard's one estimator says it.
    framework: Literal["pytorch", "tensorflow", "sklearn"] = "pytorch"
    image_uri: str | None = Field(default=None, max_length=255)
    framework_version: str | None = Field(default=None, max_length=32)
    py_version: str | None = Field(default=None, max_length=16)
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    instance_type: str = Field(min_length=1, max_length=64)
    # The server's maximum is checked with its configuration; this bounds what is read.
    instance_count: int = Field(default=1, ge=1, le=INT32_MAX)
    volume_size: int = Field(default=30, ge=1, le=16384)
    distribution: Distribution = Field(default_factory=Distribution)
    inputs: dict[str, Channel] = Field(default_factory=dict)
    output_path: str | None = Field(default=None, max_length=1024)
    max_run: int = Field(default=24 * 3600, ge=1, le=MAX_RUN_LIMIT)
    environment: dict[str, str] = Field(default_factory=dict)
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    metric_definitions: list[MetricDefinition] = Field(
        default_factory=list, max_length=MAX_METRIC_DEFINITIONS
    )
    backend: str | None = Field(default=None, max_length=32)
    # Where checkpoints are kept across restarts (s3:// or file://), and where the script
    # writes them on the instance (absolute; SM_CHECKPOINT_DIR).
    checkpoint_s3_uri: str | None = Field(default=None, min_length=1, max_length=1024)
    checkpoint_local_path: str | None = Field(default=None, min_length=1, max_length=1024)
    # Restarts after an application failure that a rule says to retry; infrastructure
    # failures (a lost instance, a spot interruption) are retried apart from these.
    max_retry_attempts: int = Field(default=0, ge=0, le=MAX_RETRY_ATTEMPTS)
    retry_rules: list[RetryRule] = Field(default_factory=list, max_length=MAX_RETRY_RULES)
    use_spot_instances: bool = False
    # With spot: the whole budget in seconds, waiting for capacity included (>= max_run).
    max_wait: int | None = Field(default=None, ge=1, le=2 * MAX_RUN_LIMIT, validate_default=True)
    # Jobs waiting for capacity start in priority order (higher first), then by age.
    priority: int = Field(default=0, ge=-1000, le=1000)
    # The metric from which the job's progress and remaining time are estimated.
    progress_metric: ProgressMetric | None = None
    # As SageMaker's ContainerEntrypoint and ContainerArguments: a command each instance
    # runs instead of an entry point, reading /opt/ml itself (the SageMaker SDK v3's
    # ModelTrainer sends one).
    container_entrypoint: list[ContainerWord] | None = Field(
        default=None, min_length=1, max_length=MAX_CONTAINER_WORDS
    )
    container_arguments: list[ContainerWord] | None = Field(
        default=None, min_length=1, max_length=MAX_CONTAINER_WORDS
    )
    # As SageMaker's EnableNetworkIsolation: the instances reach each other and nothing
    # else (no egress to the network the machine reaches).
    enable_network_isolation: bool = False
    # Set by the server at submission, from image_uri or framework, framework_version and
    # py_version; a client names an image with those.
    image: ImageChoice | None = None

    def job_spec_at(self, output_path: str) -> JobSpec:
        """The job as the backends and its instances would see it, writing its output
        under ``output_path``."""
        return JobSpec(
            entry_point=self.entry_point or "",
            source_uri=self.source_uri or "",
            instance_type=self.instance_type,
            output_path=output_path,
            instance_count=self.instance_count,
            volume_size=self.volume_size,
            framework=self.framework,
            image_uri=self.image_uri,
            hyperparameters=dict(self.hyperparameters),
            distribution=self.distribution.as_dict(),
            inputs={
                name: ChannelSpec(**channel.model_dump()) for name, channel in self.inputs.items()
            },
            environment=dict(self.environment),
            checkpoint_s3_uri=self.checkpoint_s3_uri,
            checkpoint_local_path=self.checkpoint_local_path,
            use_spot_instances=self.use_spot_instances,
            container_entrypoint=tuple(self.container_entrypoint or ()),
            container_arguments=tuple(self.container_arguments or ()),
            enable_network_isolation=self.enable_network_isolation,
            image=images.Choice(self.image.name, self.image.container, self.image.note)
            if self.image is not None
            else images.Choice(),
        )


class JobRecord(JobFields):
    """A job as it was accepted. Unknown keys are ignored, not refused: a field retired
    since must not make an older job unreadable."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    output_path: str
    # A job stored before images were chosen runs the built-in one.
    image: ImageChoice = Field(default_factory=ImageChoice)

    @classmethod
    def load(cls, spec: Mapping[str, Any]) -> Self:
        """The record stored as ``spec`` (a ``TrainingJob.spec``)."""
        return cls.model_validate(spec, context={STORED: True})

    def dump(self) -> dict[str, Any]:
        """As it is stored: JSON, without the fields that are not set."""
        return self.model_dump(mode="json", exclude_none=True)

    def job_spec(self) -> JobSpec:
        """The job as the backends and its instances see it."""
        return self.job_spec_at(self.output_path)


# Records parsed, by job id: jobs read again and again (a log's ingest, the reconciler's
# passes, describe) are parsed once, not at every read (22 us each, more for a large
# spec). Enough for every live job of a large deployment.
_PARSED_JOBS = 4096
_parsed: LRUCache[str, tuple[Mapping[str, Any], JobRecord]] = LRUCache(_PARSED_JOBS)
_parsed_lock = threading.Lock()


def record_of(job_id: str, spec: Mapping[str, Any]) -> JobRecord:
    """The record of job ``job_id`` stored as ``spec``, parsed once for as long as its
    stored form is the same: a record is written once, when its job is accepted, but the
    answer is checked against what was read all the same (a comparison of two dicts,
    a tenth of a parse), so nothing but the same stored form ever gets a kept record.
    The record is frozen, and its lists and dicts are not to be changed in place."""
    with _parsed_lock:
        kept = _parsed.get(job_id)
    if kept is not None and (kept[0] is spec or kept[0] == spec):
        return kept[1]
    record = JobRecord.load(spec)
    with _parsed_lock:
        _parsed[job_id] = (spec, record)
    return record
