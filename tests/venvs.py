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
import sysconfig
import threading
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
    pip = subprocess.Popen(
        [str(python), "-m", "pip", "install", "--quiet", *requirements],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    with _pips_lock:
        _pips.add(pip)
    try:
        output, _ = pip.communicate(timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        pip.kill()
        pip.wait()
        pytest.fail(f"installing {requirements} took over {BUILD_TIMEOUT} s")
    finally:
        with _pips_lock:
            _pips.discard(pip)
    if pip.returncode != 0:
        pytest.fail(f"could not install {requirements}:\n{output}")


# The pips making environments now, so that an interrupted run can stop them (an
# environment left unmarked is made again from nothing).
_pips: set[subprocess.Popen[str]] = set()
_pips_lock = threading.Lock()


def make_ahead(makers: list[Callable[[], object]]) -> threading.Thread:
    """Make environments in the background, one after another, while other tests run: a
    test that needs one waits for it on its lock. A failure is left to that test, which
    makes the environment again and reports pip's error."""

    def make_all() -> None:
        for make in makers:
            try:
                make()
            except BaseException:  # pytest.fail too: the test that needs it will say why
                continue

    thread = threading.Thread(target=make_all, name="venvs-ahead", daemon=True)
    thread.start()
    return thread


def stop_making(thread: threading.Thread) -> None:
    """At the end of an interrupted run: end any pip still making an environment."""
    with _pips_lock:
        for pip in _pips:
            pip.terminate()
    thread.join(30)


def above_this_venv(python: Path) -> Path:
    """Make the virtual environment of ``python`` see the suite's own packages (Runyard, its
    dependencies, torch) below its own: its site directory names this one in a ``.pth``
    file, with an import line so that this one's ``.pth`` files (Runyard's editable
    install) count too. Returns its own site directory."""
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    here = sysconfig.get_paths()["purelib"]
    (site / "runyard-venv.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    return site
