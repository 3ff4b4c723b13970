"""Processes of jobs run with the suite's TensorFlow environment, found in /proc: the check
that nothing of a job outlives it. The instances' runtimes are told by the interpreter they
run, the jobs' own processes (which run the interpreter of their instance's layer above
it) by the job their environment names. (Their working directories and host names are
their instances' own, in namespaces; only these tests and the bench run it.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from contract import variables


def tf_processes(python: Path | str, job_ids: Iterable[str]) -> dict[int, str]:
    """pid -> command line of every live process that ``python`` runs, but a server's own
    (``python -m runyard ...``), and of every process of the jobs ``job_ids``: instances'
    runtimes, ps tasks, scripts."""
    marks = {f"{variables.JOB_ID}={job_id}".encode() for job_id in job_ids}
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = [
                part.decode(errors="replace")
                for part in (entry / "cmdline").read_bytes().split(b"\0")
            ]
            if (argv[0] == str(python) and argv[1:3] != ["-m", "runyard"]) or marks & set(
                (entry / "environ").read_bytes().split(b"\0")
            ):
                found[int(entry.name)] = " ".join(part for part in argv if part)
    return found
