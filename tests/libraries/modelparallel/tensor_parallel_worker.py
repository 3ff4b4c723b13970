"""One rank of a 2-rank check that a family's blocks, split by tensor parallelism, compute
what the whole model does, each rank fed its own half of the batch: the rank's logits and
loss against the whole model's on its rows; the gradient of every parameter against the
whole model's, of the group's losses summed for a split block's parameters (the block
computes on both ranks' rows) and of the rank's own loss for the others; and the split
model's state_dict against the whole one's.

argv: output folder. Writes, per rank, the largest differences found per family.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from libraries.modelparallel import batches, projections, tensor
from tests.libraries.modelparallel.transformers_workload import FAMILIES, batch, loss_of, model


def differences(family: str, mesh: DeviceMesh) -> dict[str, float]:
    whole, split = model(family), model(family)
    marked = {id(module): True for module in split.modules()}
    blocks = tensor.distribute(split, marked, mesh)
    ids, mask = batch(0)
    rank, size = dist.get_rank(), dist.get_world_size()
    halves = [slice(r * len(ids) // size, (r + 1) * len(ids) // size) for r in range(size)]
    own = halves[rank]
    found = {"blocks": float(len(blocks))}
    output = split(input_ids=ids[own], attention_mask=mask[own], labels=ids[own])
    output["loss"].backward()
    expected = whole(input_ids=ids[own], attention_mask=mask[own], labels=ids[own])
    found["logits"] = (output["logits"] - expected["logits"]).abs().max().item()
    found["loss"] = abs(output["loss"].item() - expected["loss"].item())
    parameters = list(whole.parameters())
    own_grads = torch.autograd.grad(expected["loss"], parameters, allow_unused=True)
    group_loss = sum(loss_of(whole, ids[half], mask[half]) for half in halves)
    group_grads = torch.autograd.grad(group_loss, parameters, allow_unused=True)
    names = [name for name, _ in whole.named_parameters()]
    references = {
        name: group if batches.inside(name, [block for block, _ in blocks]) else mine
        for name, mine, group in zip(names, own_grads, group_grads, strict=True)
    }
    held_by_rank = projections.parted(split)
    worst, shards = 0.0, 0
    for name, parameter in split.named_parameters():
        reference = references[name]
        grad = parameter.grad
        assert grad is not None, name
        assert reference is not None, name
        if isinstance(grad, DTensor):
            shards += 1
            grad = grad.full_tensor()
            parts = held_by_rank.get(name)
            if parts is not None:  # GPT-2's query, key and value, held by rank while split
                grad = projections.in_model_order(grad, parts.axis, parts.parts, parts.degree)
        worst = max(worst, (grad - reference).abs().max().item())
    found["gradients"] = worst
    # What a split model saves is the model's own: every parameter in the model's order.
    saved = get_model_state_dict(split, options=StateDictOptions(full_state_dict=True))
    found["state_dict"] = max(
        (saved[key] - value).abs().max().item() for key, value in whole.state_dict().items()
    )
    found["split_weights"] = float(shards)
    return found


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    mesh = DeviceMesh("cpu", list(range(dist.get_world_size())))
    results = {family: differences(family, mesh) for family in FAMILIES}
    rank = int(os.environ["RANK"])
    (out / f"tensor-parallel-rank-{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
