"""A Horovod PyTorch script that reports what each Horovod call gave it (one ``CHECK``
JSON line per rank) and trains the workload's model under each variant of
DistributedOptimizer; rank 0 saves the final parameters of each to SM_MODEL_DIR."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import horovod
import horovod.torch as hvd
import torch
import workload
from torch import nn


def error_of(call: Any) -> str:
    try:
        call()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "no error"


def tensor_checks(rank: int, size: int) -> dict[str, Any]:
    one = torch.tensor([rank + 1.0])
    found: dict[str, Any] = {
        "average": hvd.allreduce(one, name="one").item(),
        "sum": hvd.allreduce(one, op=hvd.Sum).item(),
        "min": hvd.allreduce(one, op=hvd.Min).item(),
        "max": hvd.allreduce(one, op=hvd.Max).item(),
        "product": hvd.allreduce(one, op=hvd.Product).item(),
        "average_flag": hvd.allreduce(one, average=False).item(),
        "int_average": hvd.allreduce(torch.tensor([rank * 3])).tolist(),
        "scaled": hvd.allreduce(
            torch.tensor([1.0]), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5
        ).item(),
        "fp16": hvd.allreduce(one / 3, compression=hvd.Compression.fp16).tolist(),
        "input_kept": one.item(),
    }
    handle = hvd.allreduce_async(torch.tensor([float(rank)]), op=hvd.Sum)
    found["async"] = hvd.synchronize(handle).item()
    found["polled"] = hvd.poll(handle)
    in_place = torch.tensor([float(rank)])
    found["in_place"] = hvd.allreduce_(in_place, op=hvd.Sum) is in_place and in_place.item()
    found["grouped"] = [t.tolist() for t in hvd.grouped_allreduce([one, one * 2], op=hvd.Sum)]
    gathered = hvd.allgather(torch.full((rank + 1, 2), float(rank)))
    found["allgather"] = gathered[:, 0].tolist()
    found["allgather_async"] = hvd.synchronize(
        hvd.allgather_async(torch.tensor([[rank, rank]]))
    ).tolist()
    found["broadcast"] = hvd.broadcast(torch.tensor([rank * 10.0]), root_rank=1).item()
    kept = torch.tensor([float(rank)])
    hvd.broadcast_(kept, root_rank=size - 1)
    found["broadcast_"] = kept.item()
    found["broadcast_object"] = hvd.broadcast_object({"from": rank}, root_rank=2)
    found["allgather_object"] = hvd.allgather_object(rank)
    return found


def gradient_checks(rank: int) -> dict[str, Any]:
    x = torch.tensor([rank + 1.0], requires_grad=True)
    (hvd.allreduce(x, op=hvd.Average) * (rank + 1)).sum().backward()
    rows = torch.full((rank + 1, 1), 1.0, requires_grad=True)
    gathered = hvd.allgather(rows)
    weights = torch.arange(gathered.shape[0], dtype=torch.float32).unsqueeze(1)
    (gathered * weights).sum().backward()
    y = torch.tensor([2.0], requires_grad=True)
    (hvd.broadcast(y, root_rank=0) * 3).sum().backward()
    return {
        "allreduce_grad": x.grad.tolist() if x.grad is not None else None,
        "allgather_grad": rows.grad[:, 0].tolist() if rows.grad is not None else None,
        "broadcast_grad": y.grad.tolist() if y.grad is not None else None,
    }


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.state_dict().values()])


def broadcast_checks(rank: int) -> dict[str, Any]:
    model = workload.make_model(workload.ROOT_SEED + rank)
    before = hvd.allgather(flat(model).unsqueeze(0))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    after = hvd.allgather(flat(model).unsqueeze(0))
    # Adam states that differ: each rank steps on gradients of its own, at its own rate.
    adam = torch.optim.Adam(model.parameters(), lr=0.001 * (rank + 1))
    for p in model.parameters():
        p.grad = torch.full_like(p, float(rank + 1))
    adam.step()
    hvd.broadcast_optimizer_state(adam, root_rank=0)
    first = next(iter(model.parameters()))
    moments = hvd.allgather(adam.state[first]["exp_avg"].reshape(1, -1))
    return {
        "params_differed_before": not bool((before == before[0]).all()),
        "params_agree_after": bool((after == after[0]).all()),
        "params_are_roots": bool(torch.equal(after[0], before[0])),
        "lr_after": adam.param_groups[0]["lr"],
        "moments_agree": bool((moments == moments[0]).all()),
        "moment_value": moments[0, 0].item(),
        "named_parameters": error_of(
            lambda: hvd.DistributedOptimizer(
                workload.make_optimizer(model), named_parameters=list(model.named_parameters())[:1]
            )
        ),
    }


def refusals() -> dict[str, Any]:
    def import_tensorflow() -> None:
        import horovod.tensorflow  # noqa: F401

    def import_keras() -> None:
        import horovod.tensorflow.keras  # noqa: F401

    model = workload.make_model(0)
    return {
        "adasum": error_of(lambda: hvd.allreduce(torch.ones(1), op=hvd.Adasum)),
        "adasum_optimizer": error_of(
            lambda: hvd.DistributedOptimizer(
                workload.make_optimizer(model),
                named_parameters=model.named_parameters(),
                op=hvd.Adasum,
            )
        ),
        "join": error_of(lambda: hvd.join()),
        "has_join": hasattr(hvd, "join"),
        "process_set": error_of(lambda: hvd.allreduce(torch.ones(1), process_set=object())),
        "tensorflow": error_of(import_tensorflow),
        "keras": error_of(import_keras),
    }


def train(variant: str, rank: int, size: int) -> tuple[dict[str, torch.Tensor], str]:
    model = workload.make_model(workload.ROOT_SEED + rank)
    lr = workload.LR / size if variant == "sum" else workload.LR
    optimizer = workload.make_optimizer(model, lr)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    options: dict[str, Any] = {
        "average": {},
        "fp16": {"compression": hvd.Compression.fp16},
        "sum": {"op": hvd.Sum},
        "predivide": {"gradient_predivide_factor": 2.0},
        "two_passes": {"backward_passes_per_step": 2},
    }[variant]
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), **options
    )
    loss_fn = nn.CrossEntropyLoss()
    refused = "no error"
    for step in range(workload.STEPS):
        inputs, labels = workload.global_batch(step)
        inputs, labels = workload.shard(inputs, rank, size), workload.shard(labels, rank, size)
        optimizer.zero_grad()
        if variant == "two_passes":
            half = len(labels) // 2
            for part in (slice(0, half), slice(half, None)):
                (loss_fn(model(inputs[part]), labels[part]) / 2).backward()
        else:
            loss_fn(model(inputs), labels).backward()
        if step == 0 and variant == "average":
            refused = error_of(optimizer.zero_grad)
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, refused


def main() -> None:
    hvd.init()
    torch.set_num_threads(1)
    rank, size = hvd.rank(), hvd.size()
    report: dict[str, Any] = {
        "rank": rank,
        "size": size,
        "local_rank": hvd.local_rank(),
        "local_size": hvd.local_size(),
        "cross_rank": hvd.cross_rank(),
        "cross_size": hvd.cross_size(),
        "is_homogeneous": hvd.is_homogeneous(),
        "version": horovod.__version__,
        "module": hvd.__name__,
    }
    report.update(tensor_checks(rank, size))
    report.update(gradient_checks(rank))
    report.update(broadcast_checks(rank))
    report.update(refusals())
    finals = {}
    for variant in workload.VARIANTS:
        finals[variant], refused = train(variant, rank, size)
        if variant == "average":
            report["zero_grad_between"] = refused
        together = hvd.allgather(torch.cat([v.reshape(-1) for v in finals[variant].values()])[None])
        report[f"{variant}_agree"] = bool((together == together[0]).all())
    print("CHECK " + json.dumps(report), flush=True)
    if rank == 0:
        model_dir = Path(os.environ.get("SM_MODEL_DIR", "model"))
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(finals, model_dir / "finals.pt")
    hvd.shutdown()


if __name__ == "__main__":
    main()
