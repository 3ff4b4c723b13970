"""How the CLI shows jobs and log lines to people."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit


def log_line(event: dict[str, Any], *, timestamp: bool = False) -> str:
    tag = " [runyard]" if event.get("stream") == "runtime" else ""
    # As `docker logs --timestamps` and `kubectl logs --timestamps`: the time first.
    when = f"{event['time']} " if timestamp else ""
    return f"{when}[{event['host']}]{tag} {event['message']}"


def submitted(name: str) -> str:
    return f"Submitted training job {name}"


def still_running(name: str) -> str:
    """What to tell someone who stopped watching a job (Ctrl-C): it was not stopped."""
    return f"{name} keeps running; `runyard stop {name}` stops it."


def artifact_location(uri: str | None) -> str | None:
    """A file:// artifact as a plain path, since that is what people open."""
    if not uri:
        return None
    parts = urlsplit(uri)
    return unquote(parts.path) if parts.scheme == "file" else uri


def training_seconds(job: dict[str, Any]) -> float | None:
    start, end = job.get("training_start_time"), job.get("training_end_time")
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def transition_line(transition: dict[str, Any]) -> str:
    when = transition["start_time"][:19].replace("T", " ")
    return f"{when}  {transition['secondary_status']:<20} {transition['message']}"


def final_summary(job: dict[str, Any]) -> list[str]:
    lines = [f"Training job {job['name']} ended: {job['status']} ({job['secondary_status']})"]
    seconds = training_seconds(job)
    if seconds is not None:
        lines.append(f"Training time: {seconds:.1f} s (billable: {job.get('billable_seconds')} s)")
    return lines + _outcome(job, width=0)


def _outcome(job: dict[str, Any], width: int) -> list[str]:
    """Why the job failed and where its model went, each that it has, labels padded to
    ``width``."""
    fields = (
        ("Failure reason:", job.get("failure_reason")),
        ("Model:", artifact_location(job.get("model_artifacts"))),
    )
    return [f"{label:<{width}} {value}" for label, value in fields if value]


def duration(seconds: float) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def describe_lines(job: dict[str, Any]) -> list[str]:
    spec = job["spec"]
    lines = [
        f"Name:             {job['name']}",
        f"Status:           {job['status']} ({job['secondary_status']})",
        f"Instances:        {spec['instance_count']} x {spec['instance_type']} on {job['backend']}"
        + (f" ({job['isolation']})" if job.get("isolation") else ""),
        f"Image:            {job.get('image') or '-'}"
        + (f" (asked for: {job['image_requested']})" if job.get("image_requested") else ""),
        f"Entry point:      {spec.get('entry_point') or '-'}",
        f"Output path:      {artifact_location(spec.get('output_path')) or '-'}",
        f"Max run:          {duration(spec.get('max_run') or 0)}",
        f"Created:          {job['created_at']}",
        f"Training start:   {job.get('training_start_time') or '-'}",
        f"Training end:     {job.get('training_end_time') or '-'}",
        f"Billable seconds: {_or_dash(job.get('billable_seconds'))}",
    ]
    if spec.get("enable_network_isolation"):
        lines.insert(3, "Network:          isolated (the instances reach one another only)")
    if job.get("spot_savings_percent") is not None:
        lines.append(f"Spot savings:     {job['spot_savings_percent']:g}% against on-demand")
    if job.get("image_note"):
        lines.append(f"Image note:       {job['image_note']}")
    if job.get("pending_reason"):
        lines.append(f"Waiting:          {job['pending_reason']}")
    if job.get("restarts") or job.get("infrastructure_restarts"):
        lines.append(
            f"Restarts:         {job.get('restarts', 0)} after application failures, "
            f"{job.get('infrastructure_restarts', 0)} after infrastructure failures, "
            f"{job.get('interruptions', 0)} of them spot interruptions "
            f"(attempt {job.get('attempt', 0) + 1})"
        )
    if job.get("progress") is not None:
        left = job.get("estimated_remaining_seconds")
        eta = f", about {duration(left)} left" if left is not None else ""
        lines.append(f"Progress:         {100 * job['progress']:.1f}%{eta}")
    lines += _outcome(job, width=17)
    lines += _mapping("Hyperparameters:", spec.get("hyperparameters") or {})
    lines += _mapping(
        "Channels:", {name: _channel(c) for name, c in (spec.get("inputs") or {}).items()}
    )
    lines.append("Transitions:")
    lines += [f"  {transition_line(item)}" for item in job["transitions"]]
    if job.get("instances"):
        lines.append("Instances:")
        for item in job["instances"]:
            code = "" if item["exit_code"] is None else f" (exit {item['exit_code']})"
            lines.append(f"  {item['host']:<8} {item['phase']}{code}")
    return lines


def _mapping(title: str, values: dict[str, Any]) -> list[str]:
    if not values:
        return []
    width = max(len(key) for key in values)
    return [title, *(f"  {key:<{width}}  {_shown(value)}" for key, value in values.items())]


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _channel(channel: Any) -> str:
    if not isinstance(channel, dict):
        return str(channel)
    mode = f" ({channel['input_mode']})" if channel.get("input_mode") else ""
    return f"{artifact_location(channel.get('uri')) or '-'}{mode}"


def final_metric_lines(metrics: list[dict[str, Any]]) -> list[str]:
    """The last value of each metric, as SageMaker's console lists FinalMetricDataList."""
    if not metrics:
        return []
    width = max(len(metric["name"]) for metric in metrics)
    lines = ["Metrics:"]
    for metric in metrics:
        at = when(str(metric["time"]))
        lines.append(f"  {metric['name']:<{width}}  {metric['value']:<12.6g}  at {at}")
    return lines


def job_table(items: list[dict[str, Any]], now: datetime | None = None) -> list[str]:
    """A row per job; its duration from creation to its end, or to ``now`` (this
    machine's clock) while it runs, as SageMaker's console counts a job's duration."""
    if not items:
        return ["no training jobs"]
    now = now or datetime.now(UTC)
    rows = [
        [
            item["name"],
            item["status"],
            item["secondary_status"],
            f"{item['instance_count']} x {item['instance_type']}",
            when(item["created_at"]),
            _lasted(item, now),
        ]
        for item in items
    ]
    return table(["NAME", "STATUS", "SECONDARY", "INSTANCES", "CREATED", "DURATION"], rows)


def _lasted(item: dict[str, Any], now: datetime) -> str:
    begun = datetime.fromisoformat(item["created_at"])
    ended = item.get("ended_at")
    end = datetime.fromisoformat(ended) if ended else now
    if begun.tzinfo is None or end.tzinfo is None:
        return "-"
    return duration(max((end - begun).total_seconds(), 0.0))


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell, as kubectl prints them."""
    rows = [header, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def when(stamp: str | None) -> str:
    return stamp[:19].replace("T", " ") if stamp else "-"
