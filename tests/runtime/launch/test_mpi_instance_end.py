"""An instance that only hosts mpirun's daemon (algo-2 and after) has done its part once the
daemon has come and gone: the stop that removes it after the first instance's result
ended the job is no stop of its, and its last line does not read "Stopped".

A real runtime process on algo-2's files, and a stand-in for Open MPI's daemon: a process
named as the daemon, carrying the instance's marks, as mpirun's launch agent starts it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from contract import variables
from runtime.launch.mpi import DAEMON_NAMES
from tests.instances import JOB_ID, launch_request, start_runtime, write_instances


def _daemon(tmp_path: Path, host: str) -> subprocess.Popen[bytes]:
    """A process whose command name is the daemon's, marked as the job's on ``host``."""
    named = tmp_path / DAEMON_NAMES[0]
    shutil.copy(shutil.which("sleep") or "/bin/sleep", named)
    marks = {variables.JOB_ID: JOB_ID, variables.HOST: host}
    return subprocess.Popen([str(named), "600"], env={**os.environ, **marks})


def _wait_for(process: subprocess.Popen[str], text: str, lines: list[str]) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if text in line:
            return
    raise AssertionError(f"never said {text!r}:\n" + "\n".join(lines))


def test_a_daemon_host_removed_after_mpirun_ended_completes(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('rank')\n")
    request = launch_request(source, instance_count=2, distribution={"mpi": {"enabled": True}})
    base = write_instances(tmp_path / "job", request)["algo-2"]
    runtime = start_runtime(base)
    lines: list[str] = []
    _wait_for(runtime, "Waiting for mpirun on algo-1", lines)
    daemon = _daemon(tmp_path, "algo-2")
    _wait_for(runtime, "MPI daemon running", lines)
    # mpirun ends (its daemons with it), the first instance reports the job's result, and
    # the job's end removes this instance at once: before it looks for its daemon again.
    daemon.kill()
    daemon.wait()
    runtime.send_signal(signal.SIGTERM)
    rest, _ = runtime.communicate(timeout=60)
    lines += rest.splitlines()
    assert runtime.returncode == 0, lines
    said = [line for line in lines if line.strip()]
    assert said[-1].endswith("MPI daemon ended"), said
    assert not any(line.endswith("Stopped") for line in said), said


def test_a_daemon_host_stopped_while_mpirun_runs_is_stopped(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('rank')\n")
    request = launch_request(source, instance_count=2, distribution={"mpi": {"enabled": True}})
    base = write_instances(tmp_path / "job", request)["algo-2"]
    runtime = start_runtime(base)
    lines: list[str] = []
    _wait_for(runtime, "Waiting for mpirun on algo-1", lines)
    daemon = _daemon(tmp_path, "algo-2")
    try:
        _wait_for(runtime, "MPI daemon running", lines)
        runtime.send_signal(signal.SIGTERM)  # a stop, while its daemon still runs
        rest, _ = runtime.communicate(timeout=60)
    finally:
        daemon.kill()
        daemon.wait()
    said = [line for line in [*lines, *rest.splitlines()] if line.strip()]
    assert said[-1].endswith("Stopped"), said
