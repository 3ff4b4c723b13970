"""Server logs as one JSON object a line (RUNYARD_LOG_FORMAT=json), for a log pipeline
to index: time, level, logger, message, and the request id and job name of the work the
line came from, whenever known."""

from __future__ import annotations

import json
import logging
import logging.config
from datetime import UTC, datetime
from typing import Any

from service.observability import context

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = context.request_id.get()
        if request_id is not None:
            line["request_id"] = request_id
        job = context.job_name.get()
        if job is not None:
            line["job"] = job
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


def logging_config(log_format: str, level: str = "INFO") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` that sends every logger (uvicorn's and Celery's
    included) to stderr in ``log_format``."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"} if log_format == "json" else {"format": TEXT_FORMAT}
    )
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "runyard",
        "stream": "ext://sys.stderr",
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"runyard": formatter},
        "handlers": {"stderr": handler},
        "root": {"handlers": ["stderr"], "level": level},
        # uvicorn's own loggers keep handlers of their own unless told to pass lines up.
        "loggers": {
            name: {"handlers": [], "propagate": True, "level": level}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }


def configure(log_format: str, level: str = "INFO") -> None:
    logging.config.dictConfig(logging_config(log_format, level))
    capture_warnings(log_format)


def capture_warnings(log_format: str) -> None:
    """Have Python's warnings go out as log lines (logger ``py.warnings``): printed
    as they otherwise are, they would be the one plain-text line among the JSON."""
    if log_format == "json":
        logging.captureWarnings(True)
