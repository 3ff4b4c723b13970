"""Joins the job's instances the way the training toolkits' own test scripts do: no
distribution, no init method, a rank from the host's place in SM_HOSTS; relies on the
rendezvous variables the framework's container exports."""

import json
import os

import torch
import torch.distributed as dist

hosts = json.loads(os.environ["SM_HOSTS"])
rank = hosts.index(os.environ["SM_CURRENT_HOST"])
dist.init_process_group("gloo", rank=rank, world_size=len(hosts))
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
names = ("MASTER_ADDR", "MASTER_PORT", "NCCL_IB_DISABLE", "NCCL_DEBUG", "TF_CPP_MIN_LOG_LEVEL")
print(
    "rendezvous "
    + json.dumps(
        {
            "rank": rank,
            "world": dist.get_world_size(),
            "sum": total.item(),
            "env": {name: os.environ.get(name) for name in names},
        }
    ),
    flush=True,
)
dist.destroy_process_group()
