"""The suite's TensorFlow: a virtual environment under ``build/tf-venv`` (made once, see
tests.venvs), so the project's ``.venv`` stays without TensorFlow.

It is the ``.venv`` with the ``tensorflow`` extra of pyproject.toml on top: the new
environment's site directory names the ``.venv``'s in a ``.pth`` file (Python's own way to
add a site directory), so Runyard, its dependencies and torch come from there and only
TensorFlow and what it needs are installed here. A server started with this interpreter
runs its local instances, and so every job's processes, with it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.venvs import BUILD, REPO, above_this_venv, made_once


def requirements() -> list[str]:
    """The ``tensorflow`` extra, as the training image installs it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["tensorflow"])


def tf_python() -> Path:
    """The interpreter of the environment with TensorFlow (made now if it is not whole)."""
    return made_once(BUILD / "tf-venv", requirements(), _on_top_of_this_venv)


def _on_top_of_this_venv(python: Path) -> None:
    above_this_venv(python)
