"""How each script process's script ended, in its own words: what its exit status alone
cannot tell once the process dies by a signal.

Each Python entry point the instance starts itself runs through Runyard's script runner
(``runtime.launch.run_script``), which writes the exit status the script ended with
(0, its ``sys.exit`` code, 1 for an uncaught exception) once the script's last line and
its exit handlers have run, and only then lets the process end. A process with a record
of 0 that still dies by a signal was killed after its script had finished: a native abort
while its interpreter was torn down, not a failure of the script. The worker group counts
it as a success and says so in the job's log (``runtime.launch.workers``); a process with
no record, or a non-zero one, is judged by its exit status as before.

The records lie below the instance's own directory, ``.runyard/exits/<n>``, written by
the job's user where its processes run as one, and read here without following a link.
Under mpirun the ranks are mpirun's to judge: they get no record, and mpirun's exit
status decides.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path, PurePosixPath

from contract import untrusted
from runtime.launch.entry_point import RUNNER
from runtime.launch.run_script import RECORD_OPTION
from runtime.launch.workers import WorkerSpec

RECORDS_DIR = PurePosixPath(".runyard", "exits")
# A record is a status and a newline; anything longer is not one.
RECORD_BYTES = 8


@dataclasses.dataclass(frozen=True)
class ExitRecords:
    """The exit records of one instance's processes, below its directory ``base``."""

    base: Path

    @property
    def directory(self) -> Path:
        return self.base / RECORDS_DIR

    def attach(self, specs: list[WorkerSpec], uid: int | None) -> list[WorkerSpec]:
        """``specs`` with a record for each process that runs a script through the
        runner, in a new directory that ``uid`` (the job's user, where its processes run
        as one) may write."""
        attached = []
        for index, spec in enumerate(specs):
            runs_script = spec.argv[1:2] == [str(RUNNER)]
            if not runs_script or spec.auxiliary:
                attached.append(spec)
                continue
            name = str(index)
            argv = [spec.argv[0], spec.argv[1], RECORD_OPTION, str(self.directory / name)]
            argv += spec.argv[2:]
            attached.append(dataclasses.replace(spec, argv=argv, exit_record=name))
        if any(spec.exit_record for spec in attached):
            self._make_directory(uid)
        return attached

    def status(self, name: str) -> int | None:
        """The exit status process ``name``'s script ended with, as its runner recorded
        it; None where it recorded none (it never got there) or left something else."""
        try:
            text = untrusted.read_start(self.base, RECORDS_DIR / name, RECORD_BYTES)
        except OSError:  # none there, or not a regular file: no word from the script
            return None
        try:
            return int(text.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            return None

    def _make_directory(self, uid: int | None) -> None:
        """Empty, so no record of an earlier run can stand for this one's."""
        directory = self.directory
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(mode=0o700, parents=True)
        if uid is not None:
            os.chown(directory, uid, uid)
