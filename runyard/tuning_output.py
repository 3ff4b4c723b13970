"""How the CLI shows tuning jobs: a row per tuning job, a tuning job described with its
trials best first, and the progress lines `runyard tune --wait` prints."""

from __future__ import annotations

from typing import Any

from runyard.output import table, when


def trials_total(tuning: dict[str, Any]) -> int:
    """How many trials the tuning job runs in all: its limit, or for a Grid without one
    every point of the grid (the server says which)."""
    return int(tuning["max_trials"])


def trials_ended(tuning: dict[str, Any]) -> int:
    counts = tuning["training_job_counts"]
    return int(counts["completed"] + counts["failed"] + counts["stopped"])


def best_objective(tuning: dict[str, Any]) -> str:
    best = tuning.get("best_trial")
    return "-" if best is None or best["objective"] is None else f"{best['objective']:.6g}"


def tuning_table(tunings: list[dict[str, Any]]) -> list[str]:
    """A row per tuning job, as listed or described (both hold its counters and best
    trial)."""
    if not tunings:
        return ["no tuning jobs"]
    rows = [
        [
            tuning["name"],
            tuning["status"],
            f"{trials_ended(tuning)}/{trials_total(tuning)}",
            best_objective(tuning),
            when(tuning["created_at"]),
        ]
        for tuning in tunings
    ]
    return table(["NAME", "STATUS", "TRIALS", "BEST", "CREATED"], rows)


def metric_of(tuning: dict[str, Any], definition: str | None) -> str:
    """The objective metric of a trial that ran ``definition`` (None: the one training
    job), from the tuning job's ``objectives``."""
    for found in tuning["objectives"]:
        if found["definition"] == definition:
            return str(found["metric_name"])
    return "objective"


def objective_words(tuning: dict[str, Any]) -> str:
    """The objective in words: "Minimize loss", or with several definitions each one's
    metric ("Minimize loss (mlp), error (tree)")."""
    found = tuning["objectives"]
    if len(found) == 1 and found[0]["definition"] is None:
        return f"{tuning['objective_type']} {found[0]['metric_name']}"
    metrics = ", ".join(f"{item['metric_name']} ({item['definition']})" for item in found)
    return f"{tuning['objective_type']} {metrics}"


def by_objective(tuning: dict[str, Any]) -> list[dict[str, Any]]:
    """The trials best first by the objective; those without one after, by number."""
    maximize = tuning["objective_type"] == "Maximize"

    def key(trial: dict[str, Any]) -> tuple[bool, float, int]:
        value = trial["objective"]
        if value is None:
            return (True, 0.0, trial["number"])
        return (False, -value if maximize else value, trial["number"])

    return sorted(tuning["trials"], key=key)


def describe_tuning_lines(tuning: dict[str, Any]) -> list[str]:
    spec = tuning["spec"]
    several = bool(spec.get("training_job_definitions"))
    limits = spec["resource_limits"]
    jobs = tuning["training_job_counts"]
    objectives = tuning["objective_counts"]
    lines = [
        f"Name:             {tuning['name']}",
        f"Project:          {tuning['project']}",
        f"Status:           {tuning['status']}",
        f"Strategy:         {spec['strategy']} (seed {spec.get('random_seed')})",
        f"Objective:        {objective_words(tuning)}",
        f"Trials:           {len(tuning['trials'])} started, {trials_ended(tuning)} ended, "
        f"{trials_total(tuning)} in all, {limits['max_parallel_training_jobs']} at once",
        f"Created:          {when(tuning['created_at'])}",
        f"Ended:            {when(tuning.get('ended_at'))}",
    ]
    if tuning.get("failure_reason"):
        lines.append(f"Failure reason:   {tuning['failure_reason']}")
    lines += [
        f"Training jobs:    {jobs['completed']} completed, {jobs['in_progress']} in progress, "
        f"{jobs['failed']} failed, {jobs['stopped']} stopped",
        f"Objectives:       {objectives['succeeded']} succeeded, {objectives['pending']} "
        f"pending, {objectives['failed']} failed",
        "Ranges:",
        *(f"  {line}" for line in _ranges_table(spec)),
        f"Best trial:       {best_trial_line(tuning)}",
    ]
    warm = spec.get("warm_start_config")
    if warm:
        lines.append(
            f"Warm start:       {warm['warm_start_type']} from "
            f"{', '.join(warm['parent_tuning_jobs'])}"
        )
        overall = tuning.get("overall_best_trial")
        if overall is not None:
            lines.append(
                f"Overall best:     {overall['name']} of {overall['tuning_job']} "
                f"({metric_of(tuning, overall.get('definition'))} {overall['objective']:.6g})"
            )
    lines.append("Trials (best first):")
    if not tuning["trials"]:
        return [*lines, "  none yet"]
    rows = [
        [
            str(trial["number"]),
            trial["name"],
            *([trial.get("definition") or "-"] if several else []),
            trial["status"],
            "-" if trial["objective"] is None else f"{trial['objective']:.6g}",
            _parameters(trial["parameters"]),
        ]
        for trial in by_objective(tuning)
    ]
    metric = "OBJECTIVE" if several else metric_of(tuning, None).upper()
    header = [
        "#",
        "TRAINING JOB",
        *(["DEFINITION"] if several else []),
        "STATUS",
        metric,
        "PARAMETERS",
    ]
    return [*lines, *(f"  {line}" for line in table(header, rows))]


def best_trial_line(tuning: dict[str, Any]) -> str:
    best = tuning.get("best_trial")
    if best is None:
        return "none yet"
    metric = metric_of(tuning, best.get("definition"))
    return f"{best['name']} ({metric} {best_objective(tuning)}; {_parameters(best['parameters'])})"


def progress_line(tuning: dict[str, Any]) -> str:
    """What `runyard tune --wait` prints each time the trials move on."""
    return (
        f"{tuning['status']}: {len(tuning['trials'])} trials started, "
        f"{trials_ended(tuning)} ended of {trials_total(tuning)}; "
        f"best so far: {best_trial_line(tuning)}"
    )


def _ranges_table(spec: dict[str, Any]) -> list[str]:
    """The ranges, with several definitions each one's under its name."""
    several = spec.get("training_job_definitions")
    if not several:
        return table(["NAME", "KIND", "VALUES"], _range_rows(spec["parameter_ranges"]))
    rows = [
        [d["definition_name"], *row] for d in several for row in _range_rows(d["parameter_ranges"])
    ]
    return table(["DEFINITION", "NAME", "KIND", "VALUES"], rows)


def _range_rows(ranges: dict[str, Any]) -> list[list[str]]:
    rows = [
        [
            item["name"],
            kind,
            f"{item['min_value']} .. {item['max_value']} ({item.get('scaling_type', 'Auto')})",
        ]
        for kind in ("continuous", "integer")
        for item in ranges.get(kind, [])
    ]
    rows += [
        [item["name"], "categorical", ", ".join(map(str, item["values"]))]
        for item in ranges.get("categorical", [])
    ]
    return rows


def _parameters(parameters: dict[str, Any]) -> str:
    return " ".join(
        f"{name}={value:.6g}" if isinstance(value, float) else f"{name}={value}"
        for name, value in parameters.items()
    )
