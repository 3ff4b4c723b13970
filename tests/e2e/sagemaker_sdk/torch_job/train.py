"""A torch.distributed script as SageMaker's PyTorch containers run it with
torch_distributed: every rank joins the env:// group, takes part in an allreduce, and
rank 0 saves a model into SM_MODEL_DIR."""

import argparse
import json
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--learning-rate", type=float, default=0.1)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
report = {"rank": rank, "world": world, "sum": total.item(), "host": os.environ["SM_CURRENT_HOST"]}
print("rank " + json.dumps(report, sort_keys=True), flush=True)
# Where SageMaker's TensorBoardOutputConfig has the script write (its LocalPath): every
# rank writes a file of its own, stored below the job's tensorboard-output folder.
config_file = os.path.join(os.environ["SM_INPUT_CONFIG_DIR"], "tensorboardoutputconfig.json")
if os.path.exists(config_file):
    with open(config_file) as f:
        tensorboard = json.load(f)["LocalPath"]
    if not os.path.isdir("/opt/ml"):  # instances that share the machine: no /opt/ml of their own
        tensorboard = tensorboard.replace("/opt/ml/output", os.environ["SM_OUTPUT_DIR"], 1)
    with open(os.path.join(tensorboard, f"rank-{rank}.txt"), "w") as f:
        f.write(f"loss {total.item()}\n")
if rank == 0:
    model = torch.nn.Linear(2, 1)
    torch.save(model.state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"))
dist.destroy_process_group()
