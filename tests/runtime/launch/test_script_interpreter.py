"""The interpreter that a shell or executable entry point's ``python`` is: the job's (its
instance's layer above its image, here the runtime's own environment), not the first on
the PATH of the machine that started it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.instances import launch_request, start_runtime, write_instances


def _run_with_a_machine_python(tmp_path: Path, entry_point: str, script: str) -> tuple[str, Path]:
    """Runs ``script`` as the entry point of an instance whose runtime was started with
    another ``python`` (one that fails) first on its PATH; returns what it printed, and
    the instance's base directory."""
    machine_bin = tmp_path / "machine-bin"
    machine_bin.mkdir()
    (machine_bin / "python").write_text("#!/bin/sh\necho 'the machine python' >&2\nexit 7\n")
    (machine_bin / "python").chmod(0o755)
    source = tmp_path / "src"
    source.mkdir()
    (source / entry_point).write_text(script)
    (source / entry_point).chmod(0o755)
    request = launch_request(source, entry_point=entry_point, hyperparameters={"epochs": 2})
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base, PATH=f"{machine_bin}{os.pathsep}{os.environ['PATH']}")
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    return output, base


SHOW = "import sys; print(sys.prefix, sys.base_prefix, sys.argv[1:])"


def test_python_in_a_shell_entry_point_is_the_jobs_interpreter(tmp_path: Path) -> None:
    script = f'python -c "{SHOW}" "$@"\n'
    output, base = _run_with_a_machine_python(tmp_path, "train.sh", script)
    layer = base / ".runyard" / "env"
    assert f"[stdout] {layer} {sys.base_prefix} ['--epochs', '2']\n" in output


def test_an_executable_entry_point_finds_the_jobs_interpreter(tmp_path: Path) -> None:
    script = f"#!/usr/bin/env python\n{SHOW}\n"
    output, base = _run_with_a_machine_python(tmp_path, "train", script)
    layer = base / ".runyard" / "env"
    assert f"[stdout] {layer} {sys.base_prefix} ['--epochs', '2']\n" in output
