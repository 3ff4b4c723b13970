"""The command that runs the user's entry point, as an argv list (never a shell string)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


class EntryPointError(Exception):
    pass


def command(code_dir: Path, entry_point: str, args: list[str]) -> list[str]:
    path = code_dir / entry_point
    if not path.is_file():
        raise EntryPointError(f"entry point {entry_point} is not a file in the source")
    if path.suffix == ".py":
        return [sys.executable, str(path), *args]
    if path.suffix == ".sh":
        return ["/bin/sh", str(path), *args]
    if os.access(path, os.X_OK):
        return [str(path), *args]
    raise EntryPointError(
        f"entry point {entry_point} is not a .py or .sh file and is not executable"
    )
