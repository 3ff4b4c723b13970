"""Virtual environments the suite makes once per checkout under ``build/`` (ignored) and
reuses, for clients too heavy for the project's ``.venv`` (the SageMaker SDKs,
TensorFlow), so a warm ``make test`` does not fetch them again.

One counts only once it is whole: a mark holding what was asked for is written after pip
has finished, and an unmarked one (an interrupted build's), or one marked for other
requirements, is made again from nothing. Making one may fail (no way to PyPI): then the
test fails with pip's error, never skips."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build"
MADE = ".made"
BUILD_TIMEOUT = 1500


def made_once(
    venv: Path, requirements: list[str], prepare: Callable[[Path], None] | None = None
) -> Path:
    """The interpreter of ``venv`` with ``requirements`` installed, making it first if it
    is not whole; ``prepare`` gets the new interpreter before pip runs."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be making it now
        wanted = "\n".join(requirements) + "\n"
        mark = venv / MADE
        if not mark.is_file() or mark.read_text() != wanted:
            _make(venv, requirements, prepare)
            mark.write_text(wanted)
    return venv / "bin" / "python"


def _make(venv: Path, requirements: list[str], prepare: Callable[[Path], None] | None) -> None:
    # A venv writes its own path into its scripts, so it is made where it stays.
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    if prepare is not None:
        prepare(python)
    try:
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *requirements],
            check=True,
            timeout=BUILD_TIMEOUT,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"could not install {requirements}:\n{exc.stdout}{exc.stderr}")
    except subprocess.TimeoutExpired:
        pytest.fail(f"installing {requirements} took over {BUILD_TIMEOUT} s")
