"""Installing what the code asks for: its requirements.txt, and the code itself when it
is a package (setup.py or pyproject.toml), as SageMaker's containers do.

Everything goes into a prefix inside the instance's base directory, never into the
environment the runtime itself runs from (on the local backend, that is the server's).
What is already installed there satisfies requirements, so torch is not fetched again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections import deque
from collections.abc import Callable
from pathlib import Path

PIP_TAIL = 20


class InstallError(Exception):
    """pip failed; the message holds the end of its output."""


def is_package(code_dir: Path) -> bool:
    return (code_dir / "setup.py").is_file() or (code_dir / "pyproject.toml").is_file()


def site_dirs(prefix: Path) -> list[str]:
    paths = sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def install(code_dir: Path, prefix: Path, say: Callable[[str], None]) -> list[str]:
    """Run the installs the code needs; returns the directories to add to PYTHONPATH
    (empty when there was nothing to install)."""
    steps: list[tuple[str, list[str]]] = []
    if (code_dir / "requirements.txt").is_file():
        steps.append(("requirements.txt", ["-r", "requirements.txt"]))
    if is_package(code_dir):
        # The code's own build uses the instance's build tools: nothing is downloaded to
        # build it (a build backend other than setuptools goes in requirements.txt).
        steps.append(("the code as a package", ["--no-build-isolation", "."]))
    if not steps:
        return []
    dirs = site_dirs(prefix)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [*dirs, os.environ.get("PYTHONPATH")])),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
    }
    for what, args in steps:
        say(f"Installing {what}")
        _pip(["install", "--prefix", str(prefix), *args], code_dir, env, say, what)
    return dirs


def _pip(
    args: list[str], cwd: Path, env: dict[str, str], say: Callable[[str], None], what: str
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "pip", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    tail: deque[str] = deque(maxlen=PIP_TAIL)
    assert process.stdout is not None  # PIPE above
    for line in process.stdout:
        line = line.rstrip("\n")
        tail.append(line)
        say(line)
    if process.wait() != 0:
        errors = [line for line in tail if "ERROR" in line] or list(tail)[-5:]
        raise InstallError(f"pip could not install {what}: {' | '.join(errors)}")
