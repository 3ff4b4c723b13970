"""An mpi4py script: every rank reports where it runs and takes part in an allreduce."""

import json
import os
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
report = {
    "rank": comm.Get_rank(),
    "size": comm.Get_size(),
    "instance": os.environ.get("RUNYARD_HOST"),
    "sm_current_host": os.environ.get("SM_CURRENT_HOST"),
    "sum": total,
    "args": sys.argv[1:],
    "sm_hp_epochs": os.environ.get("SM_HP_EPOCHS"),
}
print("mpi " + json.dumps(report, sort_keys=True), flush=True)
