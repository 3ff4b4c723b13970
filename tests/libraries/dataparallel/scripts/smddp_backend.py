"""A script in the style of SageMaker's library v1.4+: torch_smddp registers the backend,
torch.distributed does the rest; plus the v1.3 module API on the same group. Prints what
it observed as one ``SEEN {json}`` line."""

import json
import os

import smdistributed.dataparallel.torch.distributed as sdist
import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401 - registers "smddp"
import torch
import torch.distributed as dist
from smdistributed.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
from torch import nn

import libraries.dataparallel

dist.init_process_group(backend="smddp")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)  # unguarded, as SageMaker's guide writes it

total = torch.tensor([float(dist.get_rank())])
sdist.all_reduce(total)
token = torch.tensor([float(dist.get_rank() + 10)])
sdist.broadcast(token, src=1)

torch.manual_seed(0)
model = DDP(nn.Linear(5, 3))
model(torch.full((2, 5), float(dist.get_rank()))).sum().backward()
gathered = [torch.empty(15) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, model.module.weight.grad.reshape(-1).contiguous())

seen = {
    "backend": dist.get_backend(),
    "rank": sdist.get_rank(),
    "world_size": sdist.get_world_size(),
    "local_rank": sdist.get_local_rank(),
    "local_size": sdist.get_local_size(),
    "is_available": sdist.is_available(),
    "is_initialized": sdist.is_initialized(),
    "all_reduce": total.item(),
    "broadcast": token.item(),
    "ddp_is_runyards": DDP is libraries.dataparallel.DistributedDataParallel,
    "instance_ranks": list(model.sharded_reducer.groups.instance_ranks),
    "grads_agree": all(torch.equal(g, gathered[0]) for g in gathered),
}
print("SEEN " + json.dumps(seen), flush=True)
del model
dist.barrier()
dist.destroy_process_group()
