"""Processes of jobs run with the suite's TensorFlow environment, found in /proc by the
interpreter they run: the check that nothing of a job outlives it. (Their working
directories and host names are their instances' own, in namespaces, so the interpreter is
what tells them; only these tests and the bench run it.)"""

from __future__ import annotations

import contextlib
from pathlib import Path

# The interpreter of an instance's own layer (runtime.instance.layers), which runs the
# job's processes: under the instance's directory, or /opt/ml with namespaces.
JOB_PYTHON = "/.runyard/env/bin/python"


def tf_processes(python: Path | str) -> dict[int, str]:
    """pid -> command line of every live process that ``python`` runs, but a server's own
    (``python -m runyard ...``): instances' runtimes; and of every process that a job's
    layer above it runs (``.../.runyard/env/bin/python``): ps tasks, scripts."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = [
                part.decode(errors="replace")
                for part in (entry / "cmdline").read_bytes().split(b"\0")
            ]
            if argv[0].endswith(JOB_PYTHON) or (
                argv[0] == str(python) and argv[1:3] != ["-m", "runyard"]
            ):
                found[int(entry.name)] = " ".join(part for part in argv if part)
    return found
