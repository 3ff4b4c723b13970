"""A refused submission, said in the command line's words: the flag to fix rather than the
JSON field, and for a mistyped instance type, the one that was probably meant."""

from __future__ import annotations

import difflib
import re
from typing import Any

from runyard.client import RunyardError

# The spec's fields that `runyard submit`'s flags set, by the flag: a refusal of a field
# names the flag that would fix it.
FLAG_OF_FIELD = {
    "entry_point": "--entry-point",
    "source_uri": "--source-uri",
    "instance_type": "--instance-type",
    "instance_count": "--instance-count",
    "framework": "--framework",
    "framework_version": "--framework-version",
    "py_version": "--py-version",
    "image_uri": "--image-uri",
    "distribution": "--distribution",
    "hyperparameters": "--hyperparameter",
    "inputs": "--input",
    "output_path": "--output-path",
    "max_run": "--max-run",
    "environment": "--env",
    "backend": "--backend",
    "checkpoint_s3_uri": "--checkpoint-s3-uri",
    "checkpoint_local_path": "--checkpoint-local-path",
    "use_spot_instances": "--use-spot-instances",
    "max_wait": "--max-wait",
    "max_retry_attempts": "--max-retry-attempts",
    "priority": "--priority",
    "enable_network_isolation": "--network-isolation",
    "name": "--name",
    "base_job_name": "--base-job-name",
}

# The server lists the types it runs when it refuses one ("...; known: local, ml.m5.large").
_KNOWN = re.compile(r"known: (?P<names>.+)$")


def in_flags(error: RunyardError, spec: dict[str, Any]) -> RunyardError:
    """``error`` with each refused field named by its flag, or ``error`` itself when the
    server refused nothing field by field."""
    if not error.problems:
        return error
    parts = [_problem(loc, message, spec) for loc, message in error.problems]
    return RunyardError(
        f"{'; '.join(parts)} (HTTP {error.status_code})", error.status_code, error.problems
    )


def _problem(loc: tuple[str, ...], message: str, spec: dict[str, Any]) -> str:
    field = loc[0] if loc else ""
    flag = FLAG_OF_FIELD.get(field)
    where = ".".join(loc) or "request"
    if flag is not None:
        # The rest of the location still matters: -i's channel, -H's key.
        rest = ".".join(loc[1:])
        where = f"{flag} ({rest})" if rest else flag
    if field == "instance_type" and isinstance(spec.get("instance_type"), str):
        suggestion = suggest(spec["instance_type"], message)
        if suggestion is not None:
            message = f"{message}; did you mean {suggestion!r}?"
    return f"{where}: {message}"


def suggest(given: str, message: str) -> str | None:
    """The known instance type closest to ``given``, from the server's refusal."""
    found = _KNOWN.search(message)
    if found is None:
        return None
    known = [name.strip() for name in found.group("names").split(",") if name.strip()]
    close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    return close[0] if close else None
