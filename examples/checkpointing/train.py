"""Training that survives interruptions: a checkpoint after every epoch, resumed on start.

Runs as SageMaker runs it (one process, or one per instance under torch_distributed):
the checkpoint goes to SM_CHECKPOINT_DIR, which Runyard restores from the job's
``checkpoint_s3_uri`` before the script starts and uploads as files are completed. On
SIGTERM (a stop, a spot interruption) it saves and exits at the end of the epoch.

Every checkpoint carries the list of epochs trained so far; on resume the script checks
that the list is exactly the epochs before the one it resumes at, so a torn or stale
checkpoint fails loudly instead of training on. ``--fail-at-epoch`` makes it fail (with
``--fail-code``) to rehearse retries: only in a fresh start unless ``--fail-on-resume``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

stopping = False


def _on_sigterm(_signum: int, _frame: object) -> None:
    global stopping
    stopping = True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--epoch-seconds", type=float, default=0.2)
    parser.add_argument("--fail-at-epoch", type=int, default=-1)
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--fail-on-resume", type=int, default=0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _on_sigterm)

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    model: nn.Module = nn.Linear(8, 1)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    inputs = torch.randn(256, 8, generator=torch.Generator().manual_seed(1))
    targets = inputs.sum(dim=1, keepdim=True)

    checkpoint = Path(os.environ["SM_CHECKPOINT_DIR"]) / "checkpoint.pt"
    start, history = 0, []
    if checkpoint.exists():
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, history = state["epoch"], state["history"]
        if history != list(range(start)):
            print(f"checkpoint is inconsistent: epoch {start}, history {history}", flush=True)
            return 3
        print(f"resumed from checkpoint at epoch {start}", flush=True)
    else:
        print("starting fresh at epoch 0", flush=True)

    for epoch in range(start, args.epochs):
        if epoch == args.fail_at_epoch and (start == 0 or args.fail_on_resume):
            print(f"failing at epoch {epoch} with exit code {args.fail_code}", flush=True)
            return args.fail_code
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        time.sleep(args.epoch_seconds)
        history.append(epoch)
        if rank == 0:
            # Written aside and renamed into place: the upload never sees half a file.
            partial = checkpoint.with_suffix(".partial")
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch + 1,
                "history": history,
            }
            torch.save(state, partial)
            os.replace(partial, checkpoint)
        print(f"epoch {epoch + 1}/{args.epochs} loss {loss.item():.5f}", flush=True)
        if _any_rank(stopping, distributed):
            print(f"SIGTERM: checkpoint at epoch {epoch + 1} saved; exiting", flush=True)
            return 0

    if rank == 0:
        model_dir = Path(os.environ["SM_MODEL_DIR"])
        torch.save({"history": history}, model_dir / "model.pt")
        print(f"trained epochs {history[0] if history else 0}..{len(history) - 1}", flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def _any_rank(flag: bool, distributed: bool) -> bool:
    """Whether any rank has the flag: all stop at the same epoch, none waits on a peer."""
    if not distributed:
        return flag
    value = torch.tensor([int(flag)])
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


if __name__ == "__main__":
    sys.exit(main())
