"""Just enough of the Dockerfile and .dockerignore formats to check the images statically.

Instructions are read as Docker reads them: comments and blank lines dropped, lines joined
at a trailing backslash, the keyword case-insensitive, exec-form arguments as JSON.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str
    # --from=build, --chown=... as {"from": "build", ...}
    flags: dict[str, str]
    # The arguments after the flags: the JSON list in exec form, else shell words.
    args: list[str]
    exec_form: bool
    raw: str


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


def parse(path: Path) -> list[Stage]:
    """The stages of a Dockerfile, each with its instructions (FROM excluded)."""
    stages: list[Stage] = []
    for line in _logical_lines(path.read_text()):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        flags, rest = _flags(rest.strip())
        exec_form = rest.startswith("[")
        args = json.loads(rest) if exec_form else shlex.split(rest)
        instruction = Instruction(keyword, flags, args, exec_form, line)
        if keyword == "FROM":
            name = args[2] if len(args) == 3 and args[1].upper() == "AS" else None
            stages.append(Stage(args[0], name))
        elif keyword == "ARG" and not stages:
            continue  # a global ARG before the first FROM
        else:
            if not stages:
                raise ValueError(f"{path}: {keyword} before the first FROM")
            stages[-1].instructions.append(instruction)
    return stages


def env(stage: Stage) -> dict[str, str]:
    """ENV KEY=VALUE pairs of a stage, later ones winning."""
    values: dict[str, str] = {}
    for instruction in stage.all("ENV"):
        for word in instruction.args:
            key, sep, value = word.partition("=")
            if not sep:
                raise ValueError(f"only ENV KEY=VALUE is supported: {instruction.raw}")
            values[key] = value
    return values


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for physical in text.splitlines():
        stripped = physical.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append((pending + stripped).strip())
        pending = ""
    if pending:
        lines.append(pending.strip())
    return lines


def _flags(rest: str) -> tuple[dict[str, str], str]:
    flags: dict[str, str] = {}
    while rest.startswith("--"):
        word, _, rest = rest.partition(" ")
        key, _, value = word[2:].partition("=")
        flags[key] = value
        rest = rest.strip()
    return flags, rest


class DockerIgnore:
    """Docker's rules: patterns match a path or any folder above it; the last match wins;
    ``!`` re-includes; ``*`` stays inside one folder and ``**`` crosses folders."""

    def __init__(self, text: str) -> None:
        self.rules: list[tuple[bool, re.Pattern[str]]] = []
        for line in text.splitlines():
            pattern = line.strip()
            if not pattern or pattern.startswith("#"):
                continue
            include = pattern.startswith("!")
            pattern = pattern.removeprefix("!").strip().strip("/")
            self.rules.append((include, re.compile(_glob_to_regex(pattern))))

    def excluded(self, path: str) -> bool:
        parts = Path(path).parts
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for include, regex in self.rules:
            if any(regex.fullmatch(candidate) for candidate in candidates):
                excluded = not include
        return excluded


def _glob_to_regex(pattern: str) -> str:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return out
