"""Virtual environments with a SageMaker Python SDK (v2 or v3) from PyPI, made once per
checkout under ``build/sdk-venvs`` (ignored) and reused, so a warm ``make test`` does not
fetch them again. One counts only once it is whole: a mark is written after pip has
finished, and an unmarked one (an interrupted build's) is made again from nothing. Making
one may fail (no way to PyPI): then the test fails with pip's error, never skips."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLACE = REPO / "build" / "sdk-venvs"
# Each generation, as pip is asked for it.
REQUIREMENTS = {"v2": "sagemaker>=2.200,<3", "v3": "sagemaker>=3"}
MADE = ".made"
BUILD_TIMEOUT = 1200


def sdk_python(generation: str) -> Path:
    """The interpreter of the virtual environment with that SDK generation."""
    PLACE.mkdir(parents=True, exist_ok=True)
    venv = PLACE / generation
    with open(PLACE / f"{generation}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be making it now
        if not (venv / MADE).is_file():
            _make(generation, venv)
    return venv / "bin" / "python"


def _make(generation: str, venv: Path) -> None:
    # A venv writes its own path into its scripts, so it is made where it stays.
    shutil.rmtree(venv, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run(
            [*pip, REQUIREMENTS[generation]],
            check=True,
            timeout=BUILD_TIMEOUT,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"could not install {REQUIREMENTS[generation]}:\n{exc.stdout}{exc.stderr}")
    except subprocess.TimeoutExpired:
        pytest.fail(f"installing {REQUIREMENTS[generation]} took over {BUILD_TIMEOUT} s")
    (venv / MADE).write_text(REQUIREMENTS[generation] + "\n")
