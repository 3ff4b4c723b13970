"""Installing what the code asks for: its requirements.txt, and the code itself when it
is a package (setup.py or pyproject.toml), as SageMaker's containers do.

The installs run with the pip of the environment they go into (the job's layer, above its
image: ``runtime.instance.layers``), so what is already installed below satisfies
requirements, and nothing below is changed.
"""

from __future__ import annotations

import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from runtime.instance import codeartifact

PIP_TAIL = 20


class InstallError(Exception):
    """pip failed; the message holds the end of its output."""


def is_package(code_dir: Path) -> bool:
    return (code_dir / "setup.py").is_file() or (code_dir / "pyproject.toml").is_file()


# How a command is started: as it is, or as ``runtime.linux.confine.Confinement.start``
# starts it (the command and environment that run it confined).
Starter = Callable[[list[str], dict[str, str]], tuple[list[str], dict[str, str]]]


def as_it_is(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    return argv, env


def install(
    code_dir: Path,
    pip: list[str],
    env: Mapping[str, str],
    say: Callable[[str], None],
    start: Starter = as_it_is,
) -> bool:
    """Run the installs the code needs with ``pip`` (an argv), each started by ``start``;
    whether there were any."""
    steps: list[tuple[str, list[str]]] = []
    if (code_dir / "requirements.txt").is_file():
        steps.append(("requirements.txt", ["-r", "requirements.txt"]))
    if is_package(code_dir):
        # The code's own build uses the instance's build tools: nothing is downloaded to
        # build it (a build backend other than setuptools goes in requirements.txt).
        steps.append(("the code as a package", ["--no-build-isolation", "."]))
    if not steps:
        return False
    variables = {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    try:
        index = codeartifact.index_url(env)
    except codeartifact.CodeArtifactError as exc:
        raise InstallError(str(exc)) from exc
    if index is not None:
        say(f"Installing from the CodeArtifact repository {env[codeartifact.REPOSITORY_ARN]}")
        variables["PIP_INDEX_URL"] = index
    for what, args in steps:
        say(f"Installing {what}")
        started = time.monotonic()
        argv, started_env = start([*pip, "install", *args], variables)
        _pip(argv, code_dir, started_env, say, what)
        say(f"Installed {what} in {time.monotonic() - started:.1f} s")
    return True


def _pip(
    argv: list[str], cwd: Path, env: dict[str, str], say: Callable[[str], None], what: str
) -> None:
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        tail: deque[str] = deque(maxlen=PIP_TAIL)
        assert process.stdout is not None  # PIPE above
        for line in process.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            say(line)
        code = process.wait()
    if code != 0:
        errors = [line for line in tail if "ERROR" in line] or list(tail)[-5:]
        raise InstallError(f"pip could not install {what}: {' | '.join(errors)}")
