"""The commands about one ended or running job's results: its metrics, its model, and its
deletion."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import click

from runyard import terminal
from runyard.charts import sparkline
from runyard.client import Client
from runyard.output import artifact_location, table

# Smaller downloads take no time worth watching.
PROGRESS_FROM_BYTES = 1 << 20


@click.command()
@click.argument("name")
@click.option("--metric", help="Only this metric (one of the job's metric_definitions).")
@click.option(
    "--limit",
    default=1000,
    show_default=True,
    type=click.IntRange(1, 10000),
    help="The latest points of each metric to read.",
)
@click.option(
    "--instance",
    is_flag=True,
    help="What each instance measured of itself (CPUUtilization, MemoryUtilization, "
    "DiskUtilization, GPU...), a row per host, instead of the script's metrics.",
)
@terminal.output_option
def metrics(name: str, metric: str | None, limit: int, instance: bool, output: str) -> None:
    """Show a job's metrics: each one's latest, lowest and highest value, and its trend
    (all hosts' points by time; with --instance, each host's). --output json gives every
    point."""
    with Client() as client:
        series = client.metrics(name, metric=metric, limit=limit, instance=instance)
    if output == "json":
        terminal.print_json({"job": name, "metrics": series})
        return
    rows = [
        _row(label, points)
        for item in series
        for label, points in _by_host(item, apart=instance)
        if points
    ]
    if not rows:
        why = "its instances report every few seconds" if instance else "see its metric_definitions"
        click.echo(f"{name} has no metric points yet ({why})")
        return
    terminal.print_lines(table(["METRIC", "LATEST", "MIN", "MAX", "POINTS", "TREND"], rows))


def _by_host(item: dict[str, Any], *, apart: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    """The series under its name, or (``apart``) each host's points under name@host."""
    if not apart:
        return [(item["name"], item["points"])]
    hosts = sorted({point["host"] for point in item["points"]})
    return [
        (f"{item['name']}@{host}", [p for p in item["points"] if p["host"] == host])
        for host in hosts
    ]


def _row(label: str, points: list[dict[str, Any]]) -> list[str]:
    values = [float(point["value"]) for point in points]
    return [
        label,
        f"{values[-1]:.6g}",
        f"{min(values):.6g}",
        f"{max(values):.6g}",
        str(len(values)),
        sparkline(values),
    ]


@click.command()
@click.argument("name")
@click.option(
    "--to",
    "destination",
    default=".",
    show_default="the current directory",
    help="A directory (the file is NAME-model.tar.gz, or NAME-output.tar.gz, in it; one "
    "ending in / is made if missing, as `aws s3 cp` makes it) or the file to write.",
)
@click.option(
    "--output-data",
    is_flag=True,
    help="The job's output data (what its script wrote to SM_OUTPUT_DATA_DIR, output.tar.gz) "
    "instead of its model.",
)
def download(name: str, destination: str, output_data: bool) -> None:
    """Download a job's model (its model.tar.gz), or with --output-data its output data."""
    what: Literal["model", "output"] = "output" if output_data else "model"
    target = _download_target(destination, f"{name}-{what}.tar.gz")
    noun = "output data" if output_data else "model"
    with Client() as client:
        size = client.download_model(
            name,
            target,
            progress=terminal.transfer_progress(
                f"Downloading {name}'s {noun}", PROGRESS_FROM_BYTES
            ),
            what=what,
        )
    click.echo(f"{target} ({size} bytes)")


def _download_target(destination: str, file_name: str) -> Path:
    """Where ``--to`` puts the file: in it when it is a directory, or names one by a
    trailing slash (made, with its parents, if missing); else the file itself, in a
    directory that must exist (a typo'd parent is not made)."""
    path = Path(destination).expanduser()
    if destination.endswith(("/", os.sep)) and not path.exists():
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot make {path}: {exc.strerror}", param_hint="--to"
            ) from None
    if path.is_dir():
        return path / file_name
    if path.exists() and not path.is_file():
        raise click.BadParameter(f"{path} is neither a directory nor a file", param_hint="--to")
    if not path.parent.is_dir():
        raise click.BadParameter(
            f"{path.parent} is not a directory (end --to with / to have it made)",
            param_hint="--to",
        )
    return path


@click.command()
@click.argument("name")
@click.option(
    "--remove-artifacts",
    is_flag=True,
    help="Also delete what the job stored below <output_path>/NAME/ (its model among them).",
)
def delete(name: str, remove_artifacts: bool) -> None:
    """Delete an ended job: its record, logs and metrics. Its artifacts stay where they
    are unless --remove-artifacts."""
    with Client() as client:
        output_path = client.get_job(name)["spec"]["output_path"]
        result = client.delete_job(name, remove_artifacts=remove_artifacts)
    folder = f"{artifact_location(output_path.rstrip('/'))}/{name}/"
    if result["artifacts"] == "removed":
        click.echo(f"deleted {name} and the {result['removed_objects']} files under {folder}")
    else:
        click.echo(f"deleted {name}; its artifacts stay under {folder}")
