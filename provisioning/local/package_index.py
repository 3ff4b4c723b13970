"""Whether the package index has a build of a framework's version for an image's Python:
pip's own answer, asked once and remembered beside the image store.

The question is pip's resolution of the framework's requirement alone
(``pip install --dry-run --no-deps --only-binary=:all: torch==1.12.1``), run with the
server's pip configuration (its index, find-links and constraints; never a job's). It
ends as soon as pip has found a build: what pip would download next is the image build's
to download. A version with no build for that Python ends in pip's "No matching
distribution found" within seconds. An answer that is neither (no index reachable, too
slow) is no answer: it is not remembered, and the image is built as asked, which then
fails, if it must, with pip's words.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# How long pip may take to say; past it there is no answer.
ASK_TIMEOUT = 20.0
# How long an answer holds: a package index gains (and, rarely, loses) builds.
REMEMBERED_SECONDS = 24 * 3600.0
# What pip prints once it has found a build of the requirement.
_FOUND = (
    "Downloading ",
    "Using cached ",
    "Processing ",
    "File was already downloaded",
    "Would install ",
)
# What pip prints when the index has no build of it for this Python.
_NONE = ("No matching distribution found", "ResolutionImpossible")
# What pip prints when it could not ask the index at all.
_UNREACHABLE = ("Retrying (", "Could not fetch URL", "NewConnectionError", "Max retries exceeded")


@dataclass(frozen=True)
class Answer:
    """Whether the index offers the requirement (None: pip could not tell), in pip's words."""

    requirement: str
    python: str
    offered: bool | None
    words: str
    asked_at: float = 0.0


class PackageIndex:
    """The package index as this server's pip sees it, with its answers remembered under
    ``root`` (the image store's ``offers/``)."""

    def __init__(self, root: Path, *, timeout: float = ASK_TIMEOUT) -> None:
        self.root = root
        self.timeout = timeout

    def remembered(self, requirement: str, python: str) -> Answer | None:
        """The answer pip gave lately, if it gave one."""
        try:
            data = json.loads(self._path(requirement, python).read_text())
            answer = Answer(**data)
        except (OSError, ValueError, TypeError):
            return None
        if time.time() - answer.asked_at > REMEMBERED_SECONDS:
            return None
        return answer

    def offers(self, requirement: str, python: str, interpreter: str) -> Answer:
        """Whether the index has a build of ``requirement`` for ``python``, asking pip (run
        by ``interpreter``, a Python of that version) unless it answered lately."""
        found = self.remembered(requirement, python)
        if found is not None:
            return found
        answer = ask(requirement, python, interpreter, self.timeout)
        if answer.offered is not None:
            self._remember(answer)
        return answer

    def _remember(self, answer: Answer) -> None:
        path = self._path(answer.requirement, answer.python)
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch.write_text(json.dumps(asdict(answer)) + "\n")
            scratch.replace(path)  # whole, for a reader in another process
        except OSError:
            # Not remembered (a full or read-only disk): pip is asked again next time,
            # and this launch goes on with the answer it has.
            with contextlib.suppress(OSError):
                scratch.unlink(missing_ok=True)

    def forget(self) -> None:
        """Every answer: a changed pip configuration asks again."""
        if self.root.is_dir():
            for path in self.root.glob("*.json"):
                path.unlink(missing_ok=True)

    def _path(self, requirement: str, python: str) -> Path:
        key = hashlib.sha256(f"{requirement} {python}".encode()).hexdigest()[:20]
        return self.root / f"{key}.json"


def ask(requirement: str, python: str, interpreter: str, timeout: float) -> Answer:
    """pip's answer, now."""
    argv = [
        interpreter, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
        "--only-binary=:all:", "--progress-bar", "off", "--no-color", requirement,
    ]  # fmt: skip
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    env.pop("VIRTUAL_ENV", None)
    asked_at = time.time()
    try:
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd="/",
        )
    except OSError as exc:
        return Answer(requirement, python, None, f"pip could not be run: {exc}", asked_at)
    lines: list[str] = []
    # pip may wait on an index in silence: the timer ends it.
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    assert process.stdout is not None  # PIPE above
    try:
        for line in process.stdout:
            lines.append(line.strip())
            if lines[-1].startswith(_FOUND):
                return Answer(requirement, python, True, lines[-1], asked_at)
    finally:
        timer.cancel()
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()
    if time.time() - asked_at >= timeout:
        return Answer(requirement, python, None, f"pip took over {timeout:.0f} s", asked_at)
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR:")]
    # pip's first error says what it could not do; the last, often, only where to read on.
    said = errors[0] if errors else lines[-1] if lines else f"exit status {process.returncode}"
    if process.returncode == 0:  # it would install it, though it said so in other words
        return Answer(requirement, python, True, said, asked_at)
    if any(word in line for line in lines for word in _UNREACHABLE):
        return Answer(requirement, python, None, said, asked_at)
    offered = False if any(word in error for error in errors for word in _NONE) else None
    return Answer(requirement, python, offered, said, asked_at)
