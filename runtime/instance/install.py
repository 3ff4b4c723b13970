"""Installing what the code asks for: its requirements.txt, and the code itself when it
is a package (setup.py or pyproject.toml), as SageMaker's containers do.

The installs run with the pip of the environment they go into (the job's layer, above its
image: ``runtime.instance.layers``), so what is already installed below satisfies
requirements, and nothing below is changed.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from runtime.instance import codeartifact

# What a failure reason keeps of pip's output where nothing in it says what failed.
PIP_TAIL = 5
# The last lines a failed build printed: its own error is usually the very last one.
BUILD_TAIL = 3
# Any one line pip said, in a failure reason (the reason has 1024 characters in all).
LONGEST_LINE = 300
# Versions shown of pip's "(from versions: ...)": the first and the last few.
SHOWN_VERSIONS = 3
# How pip (rich's boxes) marks a failed step, its exit code and the output of a build.
FAILED_STEP = "\u00d7"  # x, the multiplication sign
BOX_SIDE = "\u2502"
EXIT_CODE = f"{BOX_SIDE} exit code:"
BUILD_OUTPUT = re.compile("^\u2570\u2500> \\[\\d+ lines? of output\\]$")


class InstallError(Exception):
    """pip failed; the message says which package and what pip said of it."""


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
        said = PipOutput()
        assert process.stdout is not None  # PIPE above
        for line in process.stdout:
            line = line.rstrip("\n")
            said.add(line)
            say(line)
        code = process.wait()
    if code != 0:
        raise InstallError(f"pip could not install {what}: {said.summary()}")


class PipOutput:
    """What pip said went wrong, read from its output as it streams by, in its own words:
    its ``ERROR:`` lines, and for a package whose build (or metadata) failed, which
    package it was, what failed, and the last lines the build printed, where pip itself
    only says "See above for output"."""

    _PACKAGE = re.compile(
        r"^\s*(?:Collecting|Processing|Obtaining|Building wheel for|Running setup\.py install "
        r"for|Preparing metadata .* for)\s+(\S+)"
    )

    def __init__(self) -> None:
        self.errors: list[str] = []
        # The package pip was last at, and what failed in its build.
        self.package: str | None = None
        self.failed: str | None = None
        self.failed_package: str | None = None
        self.exit_code: str | None = None
        self.build_output: deque[str] = deque(maxlen=BUILD_TAIL)
        self._in_build_output = False
        self.tail: deque[str] = deque(maxlen=PIP_TAIL)

    def add(self, line: str) -> None:
        text = line.strip()
        if self._in_build_output:
            if text == "[end of output]":
                self._in_build_output = False
            elif text:
                self.build_output.append(text)
            return
        if text:
            self.tail.append(text)
        if (found := self._PACKAGE.match(line)) is not None:
            self.package = found.group(1)
        elif text.startswith("ERROR:") and text not in self.errors:
            self.errors.append(text)
        elif text.startswith(FAILED_STEP) and self.failed is None:
            # Said twice, in the build's box and after it: the first names the step.
            self.failed = text.removeprefix(FAILED_STEP).strip().rstrip(".")
            self.failed_package = self.package
        elif text.startswith(EXIT_CODE) and self.exit_code is None:
            self.exit_code = text.removeprefix(BOX_SIDE).strip()
        elif BUILD_OUTPUT.match(text) and not self.build_output:
            self._in_build_output = True

    def summary(self) -> str:
        """Which package failed and why, in pip's words (and the build's)."""
        parts = []
        if self.failed is not None:
            build = self.failed
            if self.failed_package is not None:
                build = f"{self.failed_package}: {build}"
            if self.exit_code is not None:
                build += f" ({self.exit_code})"
            if self.build_output:
                build += ": " + " / ".join(self.build_output)
            parts.append(build)
        parts += self.errors
        return " | ".join(_shortened(part) for part in parts or self.tail)


def _shortened(line: str) -> str:
    """A line of pip's short enough to share a failure reason: a long list of the versions
    there are cut to its first and last few."""

    def versions(found: re.Match[str]) -> str:
        listed = found.group(1).split(", ")
        if len(listed) <= 2 * SHOWN_VERSIONS + 1:
            return found.group(0)
        kept = [*listed[:SHOWN_VERSIONS], "...", *listed[-SHOWN_VERSIONS:]]
        return f"(from versions: {', '.join(kept)})"

    line = re.sub(r"\(from versions: ([^)]*)\)", versions, line)
    return line if len(line) <= LONGEST_LINE else line[: LONGEST_LINE - 3] + "..."
