"""One rank of a 2-rank check that a family's blocks, split by tensor parallelism, compute
what the whole model does: the same batch on both ranks, logits and loss compared, then
the gradient of every split weight against the whole model's (each rank its shard), and
the split model's state_dict against the whole one's.

argv: output folder. Writes, per rank, the largest differences found per family.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from libraries.modelparallel import projections, tensor
from tests.libraries.modelparallel.transformers_workload import batch, model

FAMILIES = ("gpt2", "llama", "neox", "bert")


def differences(family: str, mesh: DeviceMesh) -> dict[str, float]:
    whole, split = model(family), model(family)
    marked = {id(module): True for module in split.modules()}
    blocks = tensor.distribute(split, marked, mesh)
    ids, mask = batch(0)
    found = {"blocks": float(len(blocks))}
    outputs = []
    for net in (whole, split):
        output = net(input_ids=ids, attention_mask=mask, labels=ids)
        output["loss"].backward()
        outputs.append(output)
    found["logits"] = (outputs[0]["logits"] - outputs[1]["logits"]).abs().max().item()
    found["loss"] = abs(outputs[0]["loss"].item() - outputs[1]["loss"].item())
    whole_parameters = dict(whole.named_parameters())
    held_by_rank = projections.parted(split)
    worst, shards = 0.0, 0
    for name, parameter in split.named_parameters():
        reference = whole_parameters[name].grad
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
