"""What the image, chart and compose tests share: the repository, its console scripts, and
a check that a command line is one the `runyard` CLI really accepts."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import click
from fastapi.testclient import TestClient

from runyard.cli import main as runyard_cli
from service.app import PUBLIC_PATHS, create_app
from service.settings import Settings

REPO = Path(__file__).resolve().parents[2]
# The parts of the service a container runs; `server` is the embedded all-in-one mode.
SERVICE_COMMANDS = ("api", "worker", "beat", "migrate")


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def console_scripts() -> dict[str, str]:
    return pyproject()["project"]["scripts"]


def venv_script(name: str) -> Path:
    """A console script installed beside the interpreter running the tests (.venv/bin)."""
    return Path(sys.executable).with_name(name)


def check_runyard_args(argv: list[str]) -> str:
    """Parse ``runyard <argv>`` with the real CLI, without running it; returns the
    subcommand. Raises click's usage errors for an unknown command or option."""
    assert argv, "an empty command"
    name, *rest = argv
    command = runyard_cli.commands.get(name)
    if command is None:
        raise click.UsageError(f"no such runyard command: {name!r}")
    with command.make_context(name, list(rest)):
        pass
    return name


def assert_health_route(path: str, home: Path) -> None:
    """``path`` answers 200 without a token, as a container or pod probe needs."""
    assert path in PUBLIC_PATHS, f"{path} needs a token"
    with TestClient(create_app(Settings(home=home))) as client:
        response = client.get(path)
    assert response.status_code == 200, response.text
