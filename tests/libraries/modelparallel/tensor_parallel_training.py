"""The tensor-parallel training runs (``tensor_parallel_training_worker``) and the one
process they must follow (``reference``): four steps of SGD, then four of Adam, on the
global batch of ``transformers_workload``."""

from __future__ import annotations

import torch

from libraries.modelparallel.tensor import planned
from tests.libraries.modelparallel.transformers_workload import (
    GLOBAL_BATCH,
    batch,
    loss_of,
    model,
)

SGD_STEPS = 4
ADAM_STEPS = 4
STEPS = SGD_STEPS + ADAM_STEPS
SGD_LR = 0.05
ADAM_LR = 0.01

SCENARIOS: dict[str, tuple[str, dict[str, object]]] = {
    # The reported run: GPT-2 split over 2 ranks, ddp on.
    "gpt2": ("gpt2", {"tensor_parallel_degree": 2, "ddp": True, "microbatches": 2}),
    # An encoder-decoder, its decoder's cross-attention split too.
    "bart": ("bart", {"tensor_parallel_degree": 2, "microbatches": 2}),
    # The other families' blocks (grouped key/value heads: one of Mistral's and Qwen2's
    # two on each rank; NeoX's fused query-key-value; BERT's encoder).
    **{
        family: (family, {"tensor_parallel_degree": 2, "microbatches": 2})
        for family in ("mistral", "qwen2", "neox", "bert")
    },
    # tp x dp: two groups of 2 over 2 instances, a sample per microbatch and rank.
    "opt_ddp": ("opt", {"tensor_parallel_degree": 2, "ddp": True, "microbatches": 2}),
    # The groups' ranks fed one batch each.
    "llama_prescaled_ddp": (
        "llama",
        {"tensor_parallel_degree": 2, "ddp": True, "microbatches": 2, "prescaled_batch": True},
    ),
    # tp x pp: 2 stages, each split over 2 ranks.
    "llama_pipeline": (
        "llama",
        {"tensor_parallel_degree": 2, "partitions": 2, "microbatches": 2},
    ),
}


def rows(index: int, size: int) -> slice:
    """The rows of the global batch that share ``index`` of ``size`` is fed."""
    per_share = GLOBAL_BATCH // size
    return slice(index * per_share, (index + 1) * per_share)


def reference(family: str) -> list[dict[str, torch.Tensor]]:
    """One process training the family's model on the global batch as the runs do: its
    parameters after each step."""
    net = model(family)
    states = []
    optimizer: torch.optim.Optimizer = torch.optim.SGD(net.parameters(), lr=SGD_LR)
    for step in range(STEPS):
        if step == SGD_STEPS:
            optimizer = torch.optim.Adam(net.parameters(), lr=ADAM_LR)
        optimizer.zero_grad()
        loss_of(net, *batch(step)).backward()
        optimizer.step()
        states.append({key: value.detach().clone() for key, value in net.state_dict().items()})
    return states


def losses_of_rows(family: str, states: list[dict[str, torch.Tensor]], fed: slice) -> list[float]:
    """The loss of rows ``fed`` of each step's batch, in one process, with the parameters
    the step began with: the model's first, then ``states`` (those after each step)."""
    net = model(family)
    losses = []
    for step in range(STEPS):
        if step:
            net.load_state_dict(states[step - 1])
        ids, mask = batch(step)
        with torch.no_grad():
            losses.append(float(loss_of(net, ids[fed], mask[fed])))
    return losses


def held_per_rank(family: str, degree: int) -> int:
    """The parameter bytes a rank of a tensor-parallel group of ``degree`` holds of the
    family's model: all of it but the other ranks' shares of the split projections (a
    row-split projection's bias stays whole)."""
    net = model(family)
    whole = sum(p.numel() * p.element_size() for p in net.parameters())
    split = 0
    for _, block, plan in planned(net, {id(m): True for m in net.modules()}, degree):
        for path in (*plan.columns, *plan.rows):
            projection = block.get_submodule(path)
            kept = ("weight", "bias") if path in plan.columns else ("weight",)
            for name in kept:
                value = getattr(projection, name, None)
                if isinstance(value, torch.Tensor):
                    split += value.numel() * value.element_size()
    return whole - split + split // degree
