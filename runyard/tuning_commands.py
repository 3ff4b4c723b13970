"""`runyard tune` and `runyard tuning`: create hyperparameter tuning jobs from a spec file,
list, describe and stop them, and follow one until it ends."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from runyard import spec_files, terminal
from runyard.client import Client, RunyardError
from runyard.tuning_output import describe_tuning_lines, progress_line, tuning_table

STATUSES = ["InProgress", "Completed", "Failed", "Stopping", "Stopped"]
EXIT_DID_NOT_COMPLETE = 1
POLL_SECONDS = 2.0


@click.command()
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="The tuning job's name, instead of the spec file's `name`.")
@click.option(
    "--wait",
    is_flag=True,
    help="Wait until the tuning job ends, printing each change of its trials and the best "
    "so far; exit non-zero unless it Completed.",
)
def tune(spec_file: Path, name: str | None, wait: bool) -> None:
    """Create a hyperparameter tuning job from a YAML/JSON SPEC_FILE of the tuning-jobs
    API's fields (name, strategy, objective, resource_limits, parameter_ranges,
    random_seed, training_job; or training_job_definitions instead of objective,
    parameter_ranges and training_job).

    In the spec file, each training job's `source_dir` and local paths in its `inputs`
    are relative to the file; `source_dir` is packed and uploaded as `runyard submit`
    does.
    """
    spec = spec_files.load_spec_file(spec_file, holding="tuning-job fields")
    if name is not None:
        spec["name"] = name
    with Client() as client:
        for training in _training_jobs(spec):
            spec_files.inputs_relative_to(training, spec_file.parent)
            if "source_dir" in training:
                source_dir = spec_file.parent / str(training.pop("source_dir"))
                training["source_uri"] = client.upload_source(
                    source_dir,
                    entry_point=training.get("entry_point"),
                    progress=spec_files.upload_progress(source_dir),
                )
        try:
            tuning = client.create_tuning_job(spec)
        except RunyardError as exc:
            # The refused field is named as the file names it (training_job.instance_type).
            raise RunyardError(f"{spec_file}: {exc}", exc.status_code, exc.problems) from None
        click.echo(f"Created tuning job {tuning['name']}")
        if wait:
            sys.exit(_follow(client, tuning["name"]))


def _training_jobs(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The spec's training jobs: its one, or each definition's (what is not a mapping is
    left for the server to refuse, naming it)."""
    found = [spec.get("training_job")]
    several = spec.get("training_job_definitions")
    if isinstance(several, list):
        found += [d.get("training_job") for d in several if isinstance(d, dict)]
    return [training for training in found if isinstance(training, dict)]


def _follow(client: Client, name: str) -> int:
    """Print a line each time the trials move on or the best changes, until it ends."""
    shown: list[str] = []

    def seen(tuning: dict[str, Any]) -> None:
        line = progress_line(tuning)
        if not shown or shown[-1] != line:
            click.echo(line)
            shown.append(line)

    try:
        tuning = client.wait_tuning_job(name, poll=POLL_SECONDS, seen=seen)
    except KeyboardInterrupt:
        click.echo(
            f"\n{name} keeps running; `runyard tuning describe {name}` shows it, "
            f"`runyard tuning stop {name}` stops it.",
            err=True,
        )
        return 130
    if tuning.get("failure_reason"):
        click.echo(f"Failure reason: {tuning['failure_reason']}")
    return 0 if tuning["status"] == "Completed" else EXIT_DID_NOT_COMPLETE


@click.group("tuning")
def tuning_group() -> None:
    """Hyperparameter tuning jobs: list, describe and stop them (`runyard tune` creates
    one)."""


@tuning_group.command("list")
@click.option("--status", type=click.Choice(STATUSES), help="Only tuning jobs in this status.")
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(1, 100),
    help="How many tuning jobs a page holds.",
)
@click.option("--cursor", help="next_cursor printed by the previous page (same --status).")
@terminal.output_option
def tuning_list(status: str | None, limit: int, cursor: str | None, output: str) -> None:
    """List tuning jobs, newest first: status, trials ended of all, the best objective."""
    with Client() as client:
        page = client.list_tuning_jobs(status=status, limit=limit, cursor=cursor)
        if output == "json":
            terminal.print_json(page)  # {"items": [...], "next_cursor": ...}
            return
    # A summary holds the counters and the best trial: the page is the one request.
    terminal.print_lines(tuning_table(page["items"]))
    if page["next_cursor"]:
        same = ["--status", status] if status else []
        again = shlex.join(["runyard", "tuning", "list", *same, "--cursor", page["next_cursor"]])
        click.echo(f"more: {again}")


@tuning_group.command("describe")
@click.argument("name")
@terminal.output_option
def tuning_describe(name: str, output: str) -> None:
    """Show a tuning job: status, strategy, objective, ranges, counters, the best trial,
    and its trials best first by the objective."""
    with Client() as client:
        tuning = client.get_tuning_job(name)
    if output == "json":
        terminal.print_json(tuning)
        return
    terminal.print_lines(describe_tuning_lines(tuning))


@tuning_group.command("stop")
@click.argument("name")
@click.option("--wait", is_flag=True, help="Wait until its running trials have stopped.")
def tuning_stop(name: str, wait: bool) -> None:
    """Stop a tuning job: no more trials are started and its running trials are stopped."""
    with Client() as client:
        tuning = client.stop_tuning_job(name)
        click.echo(f"{name}: {tuning['status']}")
        if wait:
            tuning = client.wait_tuning_job(name, poll=POLL_SECONDS)
            click.echo(f"{name}: {tuning['status']}")
