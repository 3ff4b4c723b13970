"""One rank of the compression job: averages buffers of awkward sizes with fp16 and bf16
compression, through both CPU paths (one all-gather for small buffers, point-to-point
messages for large ones), then trains with the point-to-point path behind DDP's hook, and
writes what it saw to ``<out>/rank-<rank>.json``.

    python -m tests.libraries.dataparallel.compression_worker <out-dir>
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from libraries import dataparallel as dp
from libraries.dataparallel import sharded_reduce
from libraries.dataparallel.sharded_reduce import COMPRESSED_DTYPES
from tests.libraries.dataparallel.workload import (
    BUCKET_CAP_MB,
    STEPS,
    make_model,
    rank_batch,
    train,
)

# Empty, fewer elements than processes, sizes no process count here divides, one more
# than a multiple of 4 * 3.
SIZES = (0, 1, 2, 3, 5, 7, 1001, 12_345)
# Which path each run forces, by the size from which the point-to-point one is taken.
PATHS = {"all_gather": 2**62, "p2p": 0}


def expected_average(inputs: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """float32 sum of the half-rounded inputs, divided, rounded once, widened."""
    total = torch.zeros_like(inputs[0])
    for values in inputs:
        total += values.to(dtype).float()
    return (total / len(inputs)).to(dtype).float()


def check(model: dp.DistributedDataParallel, size: int, seed: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed * 1000 + dist.get_rank())
    # Magnitudes from 1e-3 to 1e3: fp16 keeps them normal, and rounding shows.
    buffer = torch.randn(size, generator=generator) * 10 ** torch.empty(size).uniform_(
        -3, 3, generator=generator
    )
    inputs = [torch.empty_like(buffer) for _ in range(dist.get_world_size())]
    dist.all_gather(inputs, buffer)
    reducer = model.sharded_reducer
    assert reducer.compression is not None
    dtype = COMPRESSED_DTYPES[reducer.compression]
    expected = expected_average(inputs, dtype)
    reducer.average_(buffer)
    results = [torch.empty_like(buffer) for _ in range(dist.get_world_size())]
    dist.all_gather(results, buffer)
    info = torch.finfo(dtype)
    # One unit in the last place of the half type, or less (eps is the ulp at 1.0).
    bound = info.eps * expected.abs() + info.smallest_normal * info.eps
    return {
        "ulps": float(((buffer - expected).abs() / bound).max()) if size else 0.0,
        "equal": int((buffer == expected).sum()),
        "identical": all(torch.equal(result, buffer) for result in results),
        "representable": torch.equal(buffer.to(dtype).float(), buffer),
    }


def run(out: Path) -> None:
    rank, world = dp.get_rank(), dp.get_world_size()
    seen: dict[str, Any] = {"rank": rank, "direct": {}, "trained": {}, "stages": {}}
    for compression in COMPRESSED_DTYPES:
        records: list[dp.CollectiveRecord] = []
        model = dp.DistributedDataParallel(
            make_model(),
            bucket_cap_mb=BUCKET_CAP_MB,
            compression=compression,
            on_collective=records.append,
        )
        for path, threshold in PATHS.items():
            sharded_reduce.COMPRESSED_P2P_MIN_NUMEL = threshold
            for seed, size in enumerate(SIZES):
                key = f"{compression}/{path}/{size}"
                seen["direct"][key] = check(model, size, seed)
            stages = {record.stage for record in records if record.input_numel}
            seen["stages"][f"{compression}/{path}"] = sorted(stages)
            records.clear()
        # Training with every bucket averaged point to point on the reduction thread.
        sharded_reduce.COMPRESSED_P2P_MIN_NUMEL = 0
        model = dp.DistributedDataParallel(
            make_model(), bucket_cap_mb=BUCKET_CAP_MB, compression=compression
        )
        params = train(model, [rank_batch(step, world, rank) for step in range(STEPS)])
        replicas = [torch.empty_like(params) for _ in range(world)]
        dist.all_gather(replicas, params)
        seen["trained"][compression] = {
            "params": params.tolist(),
            "identical": all(torch.equal(replica, params) for replica in replicas),
        }
        del model
        gc.collect()
    (out / f"rank-{rank}.json").write_text(json.dumps(seen))


def main() -> None:
    dp.init_process_group()
    run(Path(sys.argv[1]))
    gc.collect()
    dp.barrier()
    dp.destroy_process_group()


if __name__ == "__main__":
    main()
