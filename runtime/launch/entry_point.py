"""The command that runs the user's entry point, as an argv list (never a shell string).

A Python entry point runs through Runyard's script runner (``run_script``), which the job's
interpreter runs by its path: the script runs as it would started directly, and its
process ends, and says how its script ended, once the script and its exit handlers are
done. Shell scripts and executables run as they are.
"""

from __future__ import annotations

import os
from pathlib import Path

# Runs what follows with the interpreter's directory ($0) first on PATH, whatever PATH the
# job's environment gives: `python`, `pip` or `torchrun` in a shell script or behind a
# `#!/usr/bin/env python` line are then the job's, as in SageMaker's containers, and not
# whatever the machine that started the instance has first. The directory is an argument,
# never part of the shell text.
_INTERPRETER_FIRST = 'export PATH="$0${PATH:+:$PATH}"; exec "$@"'
# Where the instance's processes find it: Runyard's packages are at the same path for them
# (read-only, where they run confined).
RUNNER = Path(__file__).resolve().with_name("run_script.py")


class EntryPointError(Exception):
    pass


def command(
    python: str, code_dir: Path, entry_point: str, args: list[str], *, as_module: bool
) -> list[str]:
    """How to run ``entry_point`` with the job's interpreter ``python``; ``as_module`` when
    the code was installed as a package, so ``pkg/train.py`` runs as ``python -m pkg.train``."""
    path = code_dir / entry_point
    if not path.is_file():
        raise EntryPointError(f"entry point {entry_point} is not a file in the source")
    if as_module and path.suffix == ".py":
        module = ".".join(Path(entry_point).with_suffix("").parts)
        return [python, str(RUNNER), "-m", module, *args]
    if path.suffix == ".py":
        return [python, str(RUNNER), str(path), *args]
    if path.suffix == ".sh":
        return _interpreter_first(python, ["/bin/sh", str(path), *args])
    if os.access(path, os.X_OK):
        return _interpreter_first(python, [str(path), *args])
    raise EntryPointError(
        f"entry point {entry_point} is not a .py or .sh file and is not executable"
    )


def _interpreter_first(python: str, argv: list[str]) -> list[str]:
    # Not resolved: a virtual environment's python is a link out of the environment.
    interpreter_dir = str(Path(python).parent)
    return ["/bin/sh", "-c", _INTERPRETER_FIRST, interpreter_dir, *argv]
