"""What confining a job's process costs (runtime.linux.confine): wall and CPU time per
start of `true`, plain and confined (a mount namespace with a cover over a hidden
directory and /tmp, the server's interpreter bound back, the job's user, seccomp), as an
instance's runtime starts each of its job's processes. Needs root.

    .venv/bin/python bench/confine_start.py [--runs 50]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from runtime.linux.confine import JOB_UID_BASE, Confinement


def _per_start(
    command: Callable[[], tuple[Sequence[str], dict[str, str] | None]], runs: int
) -> tuple[float, float]:
    """Milliseconds of wall time and of CPU time (the children's) per start, of what
    ``command`` gives each time (a confined start hands its environment over once)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    for _ in range(runs):
        argv, env = command()
        subprocess.run(argv, env=env, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall / runs * 1000, cpu / runs * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("confining takes root")
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as home:
        Path(scratch).chmod(0o1777)
        how = Confinement(
            uid=JOB_UID_BASE + 1,
            hidden=(home,),
            private={"/tmp": scratch},
            read_only=(sys.prefix, sys.base_prefix),
        )
        plain = _per_start(lambda: (["true"], None), args.runs)
        confined = _per_start(lambda: how.start(["true"], dict(os.environ)), args.runs)
    print(f"starts of `true`, {args.runs} each:")
    print(f"  plain     {plain[0]:6.1f} ms wall  {plain[1]:6.1f} ms CPU per start")
    print(f"  confined  {confined[0]:6.1f} ms wall  {confined[1]:6.1f} ms CPU per start")
    print(f"  the confinement: {confined[1] - plain[1]:.1f} ms CPU per process started")


if __name__ == "__main__":
    main()
