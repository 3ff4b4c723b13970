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
BUILD_OUTPUT = re.compile("^\u2570\u2500> \\[(\\d+) lines? of output\\]$")
# What pip prints after the lines of a build's output that it announced.
END_OF_OUTPUT = "[end of output]"


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
        # The first build output pip showed (the failed build's), and the one it is
        # showing now, if any.
        self.build_output: _BuildOutput | None = None
        self._showing: _BuildOutput | None = None
        self.tail: deque[str] = deque(maxlen=PIP_TAIL)

    def add(self, line: str) -> None:
        text = line.strip()
        if self._showing is not None:
            if self._showing.take(text):
                return
            self._showing = None  # past its end: this line is pip's own
        if text == END_OF_OUTPUT:
            return  # the end of a build's output that had more lines than pip counted
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
        elif (shown := BUILD_OUTPUT.match(text)) is not None:
            self._showing = _BuildOutput(int(shown.group(1)))
            self.build_output = self.build_output or self._showing

    def summary(self) -> str:
        """Which package failed and why, in pip's words (and the build's)."""
        build = self.failed_build()
        parts = [build] if build is not None else []
        parts += self.errors
        return " | ".join(_shortened(part) for part in parts or self.tail)

    def failed_build(self) -> str | None:
        """Which package's build failed, at which step, and what the build said last."""
        if self.failed is None:
            return None
        build = self.failed
        if self.failed_package is not None:
            build = f"{self.failed_package}: {build}"
        if self.exit_code is not None:
            build += f" ({self.exit_code})"
        said = self.build_output.said() if self.build_output is not None else []
        if said:
            build += ": " + " / ".join(said)
        return build


class _BuildOutput:
    """What a build printed, as pip shows it in its box: as many lines as pip says it
    has (a line inside that reads like pip's end is the build's own), then pip's end
    marker. A build that is pip itself (installing build dependencies) is read as pip is,
    so that where it failed to build a package, that build's words are what it said."""

    def __init__(self, lines: int) -> None:
        self.left = lines
        self.last: deque[str] = deque(maxlen=BUILD_TAIL)
        self.inner = PipOutput()

    def take(self, text: str) -> bool:
        """Whether ``text`` is one of its lines or its end; taken if so."""
        if self.left == 0:
            self.left = -1
            return text == END_OF_OUTPUT
        if self.left < 0:
            return False
        self.left -= 1
        if self.left == 0 and text.endswith(END_OF_OUTPUT) and text != END_OF_OUTPUT:
            # The build's last line had no line end: pip's end marker follows on its line.
            text = text.removesuffix(END_OF_OUTPUT).strip()
            self.left = -1
        if text:
            self.last.append(text)
            self.inner.add(text)
        return True

    def said(self) -> list[str]:
        """The last lines the build printed, or the failure its own pip reported."""
        inner = self.inner.failed_build()
        return [inner] if inner is not None else list(self.last)


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
