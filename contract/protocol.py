"""What an instance's runtime and the service say to each other, defined once.

The runtime builds these messages and sends ``body(message)`` as JSON; the service
validates the same types with pydantic (``service.kit.protocol``), taking each field's
bounds from its ``metadata`` here, so a field added, renamed or bounded on one side is on
both. Standard library only: this is imported on every instance.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal
from urllib.parse import quote

from contract.failure_causes import FailureCause
from contract.limits import MAX_LINE, MAX_LOG_BATCH
from contract.phases import Phase

# What a 32-bit integer holds (PostgreSQL's Integer columns, exit statuses, log seqs).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# Where the service keeps its jobs, and below it each instance's routes.
JOBS_PATH = "/v1/training-jobs"
INSTANCE_PATH = "/{name}/instances/{host}"
# Where it keeps its hyperparameter tuning jobs.
TUNING_JOBS_PATH = "/v1/tuning-jobs"


class Endpoint(StrEnum):
    """The instance routes, below ``INSTANCE_PATH``."""

    STATUS = "status"
    LOGS = "logs"
    INTERRUPTION = "interruption"
    CREDENTIALS = "credentials"
    METRICS = "metrics"


def instance_url(service_url: str, job_name: str, host: str) -> str:
    """The base of one instance's routes on the service at ``service_url``."""
    return f"{service_url.rstrip('/')}{instance_path(job_name, host)}"


def instance_path(job_name: str, host: str, endpoint: Endpoint | None = None) -> str:
    """One instance's path for ``endpoint`` (without one, the base of its routes), from
    the service's root: what a client of the API asks for."""
    template = INSTANCE_PATH if endpoint is None else instance_route(endpoint)
    return JOBS_PATH + template.format(name=quote(job_name), host=quote(host))


def instance_route(endpoint: Endpoint) -> str:
    """The service's path template of ``endpoint``, below ``JOBS_PATH``."""
    return f"{INSTANCE_PATH}/{endpoint}"


# The streams a line comes from: the script's two, and the runtime's own words.
Stream = Literal["stdout", "stderr", "runtime"]

# Which start of the job a message belongs to: the service ignores an earlier attempt's.
# Absent from runtimes that predate restarts, and from a person rehearsing a notice.
_ATTEMPT: dict[str, Any] = {"ge": 0, "le": INT32_MAX}


@dataclass(frozen=True)
class StatusReport:
    """Sent by the runtime on an instance when its phase changes."""

    phase: Phase
    time: datetime
    message: str = field(default="", metadata={"max_length": 4096})
    exit_code: int | None = field(default=None, metadata={"ge": INT32_MIN, "le": INT32_MAX})
    # Longer reasons are cut to fit by the service, not refused: an instance's last words.
    failure_reason: str | None = None
    model_uri: str | None = field(default=None, metadata={"max_length": 2048})
    attempt: int | None = field(default=None, metadata=_ATTEMPT)
    # Why a Failed instance failed. Absent from runtimes that predate it: the service then
    # reads the cause as the reconciler did before (``failure_causes.untyped_cause``).
    failure_cause: FailureCause | None = None


@dataclass(frozen=True)
class LogBatch:
    """A host's next lines, packed: ``rows`` of ``(time, stream, message)`` numbered on
    from ``first_seq`` (a line's time is seconds since the epoch, UTC)."""

    # The last row's number, too, fits a 32-bit seq.
    first_seq: int = field(metadata={"ge": 1, "le": INT32_MAX - MAX_LOG_BATCH})
    rows: list[tuple[float, Stream, str]] = field(metadata={"max_length": MAX_LOG_BATCH})


# Each row's message is at most this long; the runtime cuts lines to it.
MAX_MESSAGE = MAX_LINE


@dataclass(frozen=True)
class InterruptionNotice:
    """A spot interruption notice for one instance."""

    message: str = field(
        default="spot capacity reclaimed", metadata={"min_length": 1, "max_length": 512}
    )
    attempt: int | None = field(default=None, metadata=_ATTEMPT)


class InstanceMetric(StrEnum):
    """What the runtime measures of its instance, by SageMaker's CloudWatch names. As
    there, CPU and GPU figures are summed over the instance's CPUs and GPUs (0 to 100 per
    CPU or GPU); memory and disk are a percentage of the whole."""

    CPU = "CPUUtilization"
    MEMORY = "MemoryUtilization"
    DISK = "DiskUtilization"
    GPU = "GPUUtilization"
    GPU_MEMORY = "GPUMemoryUtilization"


# Samples one message may carry: a runtime that could not reach the service for a while
# sends what it kept in one go.
MAX_INSTANCE_METRIC_ROWS = 1000


@dataclass(frozen=True)
class InstanceMetrics:
    """A host's utilisation samples: ``rows`` of ``(time, metric, value)``, a time in
    seconds since the epoch, UTC."""

    rows: list[tuple[float, InstanceMetric, float]] = field(
        metadata={"min_length": 1, "max_length": MAX_INSTANCE_METRIC_ROWS}
    )


InstanceMessage = StatusReport | LogBatch | InterruptionNotice | InstanceMetrics


def body(message: InstanceMessage) -> dict[str, Any]:
    """``message`` as the JSON object sent: unset optional fields left out, times in ISO
    8601 (an older service refuses fields it does not know, and None is never meant)."""
    sent: dict[str, Any] = {}
    for item in dataclasses.fields(message):
        value = getattr(message, item.name)
        if value is None:
            continue
        sent[item.name] = value.isoformat() if isinstance(value, datetime) else value
    return sent
