"""Runs one MPI rank's command with the job's own variables and torch's rank variables.

The job's variables come under Runyard's names (``runtime.launch.mpi``), so that mpirun,
its daemons and their launch agents never run with them; here they get their own names
back. This process then becomes the script (exec), so that the variables the loader reads
only when a program starts (LD_PRELOAD, LD_LIBRARY_PATH) take effect in the script and
in nothing before it.

``mpirun`` gives each rank OMPI_COMM_WORLD_*; scripts that call
``torch.distributed.init_process_group()`` with the env:// default read RANK, WORLD_SIZE and
friends instead. Both are set, so either kind of script runs unchanged.

    python -m runtime.launch.mpi_rank <command> [args...]
"""

from __future__ import annotations

import os
import sys

from contract import variables

_FROM_OPEN_MPI = {
    "RANK": "OMPI_COMM_WORLD_RANK",
    "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
    "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK",
    "LOCAL_WORLD_SIZE": "OMPI_COMM_WORLD_LOCAL_SIZE",
}


def main() -> None:
    command = sys.argv[1:]
    if not command:
        sys.exit("usage: python -m runtime.launch.mpi_rank <command> [args...]")
    os.environ.update(variables.take_job_variables(os.environ))
    # After the job's: a rank's place is Open MPI's to say, whatever the job sets.
    for torch_name, mpi_name in _FROM_OPEN_MPI.items():
        if mpi_name in os.environ:
            os.environ[torch_name] = os.environ[mpi_name]
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
