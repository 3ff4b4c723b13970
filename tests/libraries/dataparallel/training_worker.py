"""One rank of the correctness job: trains the workload under Runyard data parallel (the
default reduce-to-owner exchange, the reduce-scatter one, fp16, bf16) and under torch's
own DDP, and writes what it saw to ``<out>/rank-<rank>.json``.

    python -m tests.libraries.dataparallel.training_worker <out-dir>
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from libraries import dataparallel as dp
from tests.libraries.dataparallel.workload import (
    BUCKET_CAP_MB,
    STEPS,
    make_model,
    rank_batch,
    train,
)

# Buffer sizes for the direct check of the reduction: one element, fewer elements than
# processes, and sizes that need padding.
DIRECT_SIZES = (1, 3, 5, 1001)


Records = dict[str, list[dp.CollectiveRecord]]


def scenarios(records: Records) -> dict[str, Callable[[nn.Module], nn.Module]]:
    """Each builds the DDP model of one way of training; the first three record the
    collectives their reduction runs."""
    return {
        "runyard": lambda model: dp.DistributedDataParallel(
            model, bucket_cap_mb=BUCKET_CAP_MB, on_collective=records["runyard"].append
        ),
        "runyard_owner": lambda model: dp.DistributedDataParallel(
            model,
            bucket_cap_mb=BUCKET_CAP_MB,
            shard_exchange="reduce_to_owner",
            on_collective=records["runyard_owner"].append,
        ),
        "runyard_scatter": lambda model: dp.DistributedDataParallel(
            model,
            bucket_cap_mb=BUCKET_CAP_MB,
            shard_exchange="reduce_scatter",
            on_collective=records["runyard_scatter"].append,
        ),
        "runyard_fp16": lambda model: dp.DistributedDataParallel(
            model, bucket_cap_mb=BUCKET_CAP_MB, compression="fp16"
        ),
        "runyard_bf16": lambda model: dp.DistributedDataParallel(
            model, bucket_cap_mb=BUCKET_CAP_MB, compression="bf16"
        ),
        "torch_ddp": lambda model: nn.parallel.DistributedDataParallel(
            model, bucket_cap_mb=BUCKET_CAP_MB
        ),
    }


def replica_divergence(params: torch.Tensor) -> float:
    replicas = [torch.empty_like(params) for _ in range(dist.get_world_size())]
    dist.all_gather(replicas, params)
    return max(float((replica - params).abs().max()) for replica in replicas)


def direct_reduction_errors(model: dp.DistributedDataParallel) -> dict[str, float]:
    """The reducer on buffers of awkward sizes against all_reduce(SUM) / world."""
    errors = {}
    for size in DIRECT_SIZES:
        generator = torch.Generator().manual_seed(dist.get_rank() * 100 + size)
        buffer = torch.randn(size, generator=generator)
        expected = buffer.clone()
        dist.all_reduce(expected)
        expected /= dist.get_world_size()
        model.sharded_reducer.average_(buffer)
        errors[str(size)] = float((buffer - expected).abs().max())
    return errors


def reduction_threads_after_models_are_gone() -> int:
    """Each Runyard model's reduction thread ends once the model is collected."""
    deadline = time.monotonic() + 10
    while True:
        alive = [t for t in threading.enumerate() if t.name == "runyard-dataparallel-reduce"]
        if not alive or time.monotonic() > deadline:
            return len(alive)
        time.sleep(0.05)


def run(out: Path) -> None:
    rank, world = dp.get_rank(), dp.get_world_size()
    batches = [rank_batch(step, world, rank) for step in range(STEPS)]
    records: Records = {"runyard": [], "runyard_owner": [], "runyard_scatter": []}
    seen: dict[str, Any] = {"rank": rank, "params": {}, "divergence": {}}
    # torch.distributed's own collectives on the group Runyard initialised.
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    seen["plain_all_reduce"] = total.item()
    seen["local_rank"], seen["local_size"] = dp.get_local_rank(), dp.get_local_size()

    for name, wrap in scenarios(records).items():
        model = wrap(make_model())
        params = train(model, batches)
        seen["params"][name] = params.tolist()
        seen["divergence"][name] = replica_divergence(params)
        if name == "runyard":
            assert isinstance(model, dp.DistributedDataParallel)
            reducer = model.sharded_reducer
            seen["shard_exchange"] = reducer.shard_exchange
            seen["gradient_as_bucket_view"] = model.gradient_as_bucket_view
            seen["instance_ranks"] = list(reducer.groups.instance_ranks)
            seen["cross_ranks"] = list(reducer.groups.cross_ranks)
            seen["direct_errors"] = direct_reduction_errors(model)
    seen["records"] = {
        name: [
            {
                "stage": record.stage,
                "group_ranks": list(record.group_ranks),
                "input_numel": record.input_numel,
                "output_numel": record.output_numel,
                "owned_shard": record.owned_shard,
            }
            for record in scenario_records
        ]
        for name, scenario_records in records.items()
    }
    gc.collect()
    seen["reduction_threads_left"] = reduction_threads_after_models_are_gone()
    (out / f"rank-{rank}.json").write_text(json.dumps(seen))


def main() -> None:
    out = Path(sys.argv[1])
    dp.init_process_group()
    # Models and their reduction threads are gone before the group is torn down.
    run(out)
    gc.collect()
    dp.barrier()
    dp.destroy_process_group()


if __name__ == "__main__":
    main()
