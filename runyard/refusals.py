"""A refused submission, said in the command line's words: the flag to fix rather than the
JSON field (for a mistyped instance type, the server's refusal names the one meant)."""

from __future__ import annotations

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
    "metric_definitions": "--metric-definition",
    "tags": "--tag",
    "backend": "--backend",
    "checkpoint_s3_uri": "--checkpoint-s3-uri",
    "checkpoint_local_path": "--checkpoint-local-path",
    "tensorboard_s3_output_path": "--tensorboard-s3-output-path",
    "tensorboard_local_path": "--tensorboard-local-path",
    "use_spot_instances": "--use-spot-instances",
    "max_wait": "--max-wait",
    "max_retry_attempts": "--max-retry-attempts",
    "priority": "--priority",
    "enable_network_isolation": "--network-isolation",
    "name": "--name",
    "base_job_name": "--base-job-name",
}


def in_flags(error: RunyardError) -> RunyardError:
    """``error`` with each refused field named by its flag, or ``error`` itself when the
    server refused nothing field by field."""
    if not error.problems:
        return error
    parts = [_problem(loc, message) for loc, message in error.problems]
    return RunyardError(
        f"{'; '.join(parts)} (HTTP {error.status_code})", error.status_code, error.problems
    )


def _problem(loc: tuple[str, ...], message: str) -> str:
    field = loc[0] if loc else ""
    flag = FLAG_OF_FIELD.get(field)
    where = ".".join(loc) or "request"
    if flag is not None:
        # The rest of the location still matters: -i's channel, -H's key.
        rest = ".".join(loc[1:])
        where = f"{flag} ({rest})" if rest else flag
    # pydantic's "Value error, " heads the server's own rules' messages: the rule is
    # what the command line says. The server's refusal of an instance type already
    # suggests one it runs.
    return f"{where}: {message.removeprefix('Value error, ')}"
