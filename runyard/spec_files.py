"""Spec files as `runyard submit` and `runyard tune` read them: YAML or JSON mappings whose
local paths are relative to the file, and the code they name packed and uploaded."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import yaml

from runyard.client import Progress, RunyardError
from runyard.inputs import as_uri

# Smaller uploads take no time worth watching.
PROGRESS_FROM_BYTES = 1 << 20


def load_spec_file(path: Path, *, holding: str = "job fields") -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RunyardError(f"cannot read spec file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise RunyardError(f"spec file {path} must hold a mapping of {holding}")
    return data


def channel_uris(channel: Any, relative_to: Path) -> Any:
    """A channel of a spec's ``inputs`` with a local path made a file:// URI, relative to
    ``relative_to``; anything else is left for the server to judge."""
    if isinstance(channel, str):
        return as_uri(channel, relative_to)
    if isinstance(channel, dict) and isinstance(channel.get("uri"), str):
        return {**channel, "uri": as_uri(channel["uri"], relative_to)}
    return channel


def inputs_relative_to(spec: dict[str, Any], here: Path) -> None:
    """Make the local paths of ``spec``'s inputs file:// URIs, relative to ``here``."""
    if isinstance(spec.get("inputs"), dict):
        spec["inputs"] = {name: channel_uris(value, here) for name, value in spec["inputs"].items()}


def upload_progress(source_dir: Path) -> Progress:
    """A progress bar on stderr for a large upload: moving on a terminal, one line
    elsewhere (a CI log)."""

    @contextlib.contextmanager
    def bar(size: int) -> Iterator[Callable[[int], object]]:
        if size < PROGRESS_FROM_BYTES:
            yield lambda _sent: None
            return
        label = f"Uploading {source_dir} ({size / (1 << 20):.1f} MiB)"
        with click.progressbar(length=size, label=label, file=sys.stderr) as shown:
            yield shown.update

    return bar
