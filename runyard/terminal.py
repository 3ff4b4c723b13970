"""Where the CLI prints: rich consoles that colour statuses on a terminal and write plain
text anywhere else (a pipe, a file, a CI log, or with NO_COLOR set), plus the progress
bar and the live waiting line, shown only on a terminal."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from runyard.client import Progress as ProgressContext

# Statuses and secondary statuses, as the API spells them.
_STYLES = {
    "Completed": "green",
    "Failed": "bold red",
    "Stopped": "yellow",
    "Stopping": "yellow",
    "Interrupted": "yellow",
    "MaxRuntimeExceeded": "yellow",
    "InProgress": "cyan",
    "Training": "cyan",
    "Pending": "magenta",
    "Waiting": "magenta",
    "Starting": "blue",
    "Downloading": "blue",
    "Uploading": "blue",
    "Restarting": "magenta",
}
# A status word is coloured where it stands as a value: a table's cell or a padded column
# (two spaces or the line's edge on each side), a field's value ("Status: Failed"), or a
# status in parentheses; never inside prose ("Training job failed", "Training start:").
_STATUS_WORDS = re.compile(
    r"(?:^|(?<=  )|(?<=: )|(?<=\())(" + "|".join(_STYLES) + r")(?=$|  |\)| \()"
)
# Each host's lines in a colour of their own (algo-1 the first), as docker compose colours
# its services' prefixes.
_HOST_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "bright_red")
_NUMBERED_HOST = re.compile(r"^algo-(\d+)$")


output_option = click.option(
    "--output",
    "-o",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text for people; json for programs (stable fields, never coloured).",
)


def console(*, err: bool = False) -> Console:
    # Made for each command: its streams are the ones of the moment (a test's capture).
    # soft_wrap: a long line stays one line, as it would with print().
    return Console(
        file=sys.stderr if err else sys.stdout, highlight=False, soft_wrap=True, emoji=False
    )


def coloured(line: str) -> Text:
    """The line, each status word in it in its colour (none is shown off a terminal)."""
    text = Text(line)
    for match in _STATUS_WORDS.finditer(line):
        text.stylize(_STYLES[match.group(1)], match.start(), match.end())
    return text


def host_colour(host: str) -> str:
    """``algo-N``'s colour: the N-th of the palette, round again after six; another name's
    by its letters, the same on every run."""
    numbered = _NUMBERED_HOST.match(host)
    index = int(numbered.group(1)) - 1 if numbered else sum(host.encode())
    return _HOST_COLOURS[index % len(_HOST_COLOURS)]


class LogPrinter:
    """Log lines as they come: plain through click off a terminal (fast, and what a file
    or pipe should get), on a terminal with each line's ``[host]`` prefix in its host's
    colour."""

    def __init__(self) -> None:
        self._console = console()
        self._styled = self._console.is_terminal and not self._console.no_color

    def print(self, line: str, host: str) -> None:
        if not self._styled:
            click.echo(line)
            return
        text = Text(line)
        prefix = f"[{host}]"
        at = line.find(prefix)
        if at >= 0:
            text.stylize(host_colour(host), at, at + len(prefix))
        self._console.print(text)


def print_lines(lines: Iterable[str], *, err: bool = False) -> None:
    out = console(err=err)
    for line in lines:
        out.print(coloured(line))


def print_json(value: Any) -> None:
    """Machine-readable output: indented JSON, never coloured, one document."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def print_json_line(value: Any) -> None:
    """One JSON document per line (JSON Lines), for streams such as logs."""
    sys.stdout.write(json.dumps(value, sort_keys=True) + "\n")
    sys.stdout.flush()


def transfer_progress(label: str, from_bytes: int) -> ProgressContext:
    """A progress bar on stderr for a transfer of ``from_bytes`` or more, on a terminal
    only: a log gets no bar redrawn a hundred times."""

    @contextlib.contextmanager
    def bar(size: int) -> Iterator[Callable[[int], object]]:
        out = console(err=True)
        if size < from_bytes or not out.is_terminal:
            yield lambda _done: None
            return
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=out, transient=False) as shown:
            task = shown.add_task(label, total=size)
            yield lambda done: shown.advance(task, done)

    return bar
