"""torch.distributed initialised by hand from Open MPI's variables, as Horovod-era
scripts do, with an explicit tcp:// rendezvous on the master address."""

import os

import torch
import torch.distributed as dist

rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
local = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
address = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world)
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"torch rank {rank}/{world} local {local} sum {total.item():.0f}", flush=True)
dist.barrier()
dist.destroy_process_group()
