"""The suite's TensorFlow: a virtual environment under ``build/tf-venv`` (ignored), made
once per checkout and reused, so the project's ``.venv`` stays without TensorFlow.

It is the ``.venv`` with the ``tensorflow`` extra of pyproject.toml on top: the new
environment's site directory names the ``.venv``'s in a ``.pth`` file (Python's own way to
add a site directory), so Runyard, its dependencies and torch come from there and only
TensorFlow and what it needs are installed here. A server started with this interpreter
runs its local instances, and so every job's processes, with it.

One counts only once it is whole: a mark is written after pip has finished, and an
unmarked one (an interrupted build's) is made again from nothing. Making it may fail (no
way to PyPI): then the test fails with pip's error, never skips."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / "build" / "tf-venv"
MADE = ".made"
BUILD_TIMEOUT = 1500


def requirements() -> list[str]:
    """The ``tensorflow`` extra, as the training image installs it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["tensorflow"])


def tf_python() -> Path:
    """The interpreter of the environment with TensorFlow (made now if it is not whole)."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / "tf-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be making it now
        wanted = "\n".join(requirements()) + "\n"
        mark = VENV / MADE
        if not mark.is_file() or mark.read_text() != wanted:
            _make(wanted)
    return VENV / "bin" / "python"


def _make(wanted: str) -> None:
    # A venv writes its own path into its scripts, so it is made where it stays.
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    python = VENV / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # An import line, so that the .venv's own .pth files (Runyard's editable install) count.
    here = sysconfig.get_paths()["purelib"]
    (Path(site) / "runyard-venv.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    try:
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *requirements()],
            check=True,
            timeout=BUILD_TIMEOUT,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"could not install {requirements()}:\n{exc.stdout}{exc.stderr}")
    except subprocess.TimeoutExpired:
        pytest.fail(f"installing {requirements()} took over {BUILD_TIMEOUT} s")
    (VENV / MADE).write_text(wanted)
