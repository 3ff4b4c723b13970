"""What the CLI colours on a terminal: status values, not the same words in prose, and
each host's log prefix in a colour of its own."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runyard import output, terminal


def _coloured_words(line: str) -> list[str]:
    text = terminal.coloured(line)
    return [line[span.start : span.end] for span in text.spans]


@pytest.mark.parametrize(
    ("line", "statuses"),
    [
        # A table's cells, and a padded column of transitions.
        ("ddp-1  Failed  AlgorithmError  2 x local", ["Failed"]),
        ("ddp-1  InProgress  Training", ["InProgress", "Training"]),
        (
            "2026-12-02 08:00:00  Training             Training image download completed.",
            ["Training"],
        ),
        # A field's value, and a status in parentheses.
        ("Status:  Completed", ["Completed"]),
        ("Training job ddp-1 ended: Failed (Failed)", ["Failed", "Failed"]),
        # The same words in prose are left alone.
        ("  Training start:  2026-12-02 08:00:00", []),
        ("Training job failed: the script exited with 1", []),
        ("Stopped by a user; Completed steps kept", []),
    ],
)
def test_status_words_are_coloured_only_where_they_stand_as_values(
    line: str, statuses: list[str]
) -> None:
    assert _coloured_words(line) == statuses


def test_each_host_has_its_own_colour_the_same_on_every_run() -> None:
    colours = [terminal.host_colour(f"algo-{n}") for n in range(1, 7)]
    assert len(set(colours)) == 6
    # The seventh host begins the palette again; a host of another name keeps its colour.
    assert terminal.host_colour("algo-7") == colours[0]
    assert terminal.host_colour("worker-a") == terminal.host_colour("worker-a")


def test_log_lines_colour_their_host_prefix_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    printer = terminal.LogPrinter()
    printer.print("[algo-1] epoch 1 Failed to converge", "algo-1")
    printer.print("[algo-2] epoch 1", "algo-2")
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("\x1b[36m[algo-1]\x1b[0m epoch 1")
    # A log line's words are the script's: no status colour in them.
    assert first.endswith(" epoch 1 Failed to converge")
    assert second.startswith("\x1b[35m[algo-2]\x1b[0m")

    monkeypatch.setenv("NO_COLOR", "1")
    terminal.LogPrinter().print("[algo-1] plain", "algo-1")
    assert capsys.readouterr().out == "[algo-1] plain\n"


def test_the_job_list_shows_how_long_each_job_ran_or_has_been_running() -> None:
    now = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    item = {"status": "Completed", "secondary_status": "Completed", "instance_count": 2}
    items = [
        {
            **item,
            "name": "ended",
            "instance_type": "local",
            "created_at": "2026-12-02T08:00:00+00:00",
            "ended_at": "2026-12-02T09:02:30+00:00",
        },
        {
            **item,
            "name": "running",
            "instance_type": "local",
            "status": "InProgress",
            "created_at": "2026-12-02T09:58:55+00:00",
            "ended_at": None,
        },
    ]
    header, ended, running = output.job_table(items, now=now)
    assert header.split() == ["NAME", "STATUS", "SECONDARY", "INSTANCES", "CREATED", "DURATION"]
    assert ended.endswith("2026-12-02 08:00:00  1h02m")
    assert running.endswith("2026-12-02 09:58:55  1m05s")
