"""SageMaker's training toolkit (``sagemaker-training`` from PyPI) and every package it
needs, as wheels, fetched once per machine into ``/var/cache/runyard-tests`` (or, where
that cannot be written, ``~/.cache/runyard-tests``): the jobs and images of the tests that
use the toolkit install it from there, with no index. Not below root's home: with
namespaces a job's installs run as the job's own user, who cannot pass root's 0700 home,
and read the machine's files as any other user does.

A wheelhouse counts only once it is whole: it is made beside its place, marked, then
moved there. Making it may fail (no way to PyPI): then the test fails with pip's error,
never skips.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

_MACHINE_CACHE = Path("/var/cache")
_CACHE = (
    _MACHINE_CACHE / "runyard-tests"
    if os.access(_MACHINE_CACHE, os.W_OK)
    else Path.home() / ".cache" / "runyard-tests"
)
WHEELHOUSE = _CACHE / "sagemaker-training"
# Written last into a wheelhouse that pip made in full.
MADE = ".made"
# A cold build fetches a few dozen wheels from PyPI and may compile some.
BUILD_TIMEOUT = 1200


def wheelhouse() -> Path:
    WHEELHOUSE.parent.mkdir(parents=True, exist_ok=True)
    WHEELHOUSE.parent.chmod(0o755)  # a job's user reads the wheels below it
    with open(WHEELHOUSE.parent / "sagemaker-training.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be making it now
        if not (WHEELHOUSE / MADE).is_file():
            _make_wheelhouse()
    return WHEELHOUSE


def _make_wheelhouse() -> None:
    """Made in a directory of its own beside WHEELHOUSE, then moved there whole: an
    interrupted build leaves nothing that reads as made."""
    making = Path(tempfile.mkdtemp(prefix=".making-", dir=WHEELHOUSE.parent))
    try:
        making.chmod(0o755)  # as a directory made the usual way: jobs read from it
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "sagemaker-training",
             "--wheel-dir", str(making)],
            check=True,
            timeout=BUILD_TIMEOUT,
        )  # fmt: skip
        if not list(making.glob("sagemaker_training-*.whl")):
            pytest.fail(f"pip made no sagemaker_training wheel in {making}")
        (making / MADE).write_text("")
        # A wheelhouse without the mark: an interrupted build's, or one made before marks.
        shutil.rmtree(WHEELHOUSE, ignore_errors=True)
        making.rename(WHEELHOUSE)
    finally:
        shutil.rmtree(making, ignore_errors=True)
