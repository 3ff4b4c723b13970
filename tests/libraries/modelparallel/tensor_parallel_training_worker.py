"""One rank of a tensor-parallel training run, written as the seed's ``train_gpt_simple.py``
is (the model made inside ``smp.tensor_parallelism()``, the loss computed inside the
model), that records what each step gives: four steps of SGD, then four of Adam.

argv: output folder, then one scenario name or more, run one after another in the same
processes (the library's state made again for each). Every rank writes its place in the
job and what each step returned to it; rank 0 writes the whole state_dict after every
step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import smdistributed.modelparallel.torch as smp
import torch

from libraries.modelparallel import state as smp_state
from tests.libraries.modelparallel.tensor_parallel_training import (
    ADAM_LR,
    ADAM_STEPS,
    SCENARIOS,
    SGD_LR,
    SGD_STEPS,
    rows,
)
from tests.libraries.modelparallel.transformers_workload import batch, model


@smp.step
def train_step(
    model: smp.DistributedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]
    model.backward(loss)
    return loss


def main() -> None:
    out, scenarios = Path(sys.argv[1]), sys.argv[2:]
    for index, scenario in enumerate(scenarios):
        if index:
            # The scenario before is done on every rank: its state goes, a new one is made.
            smp.barrier()
            smp_state.reset()
        run(out, scenario)


def run(out: Path, scenario: str) -> None:
    family, config = SCENARIOS[scenario]
    smp.init(config)
    with smp.tensor_parallelism():
        net = model(family)
    wrapped = smp.DistributedModel(net)
    optimizer = smp.DistributedOptimizer(torch.optim.SGD(wrapped.parameters(), lr=SGD_LR))
    # Each rank its own rows, or each group its own (``prescaled_batch``).
    if config.get("prescaled_batch"):
        fed = rows(smp.rdp_rank(), smp.rdp_size())
    else:
        fed = rows(smp.dp_rank(), smp.dp_size())
    wrapped.train()
    losses, states = [], []
    for step in range(SGD_STEPS + ADAM_STEPS):
        if step == SGD_STEPS:
            adam = torch.optim.Adam(wrapped.parameters(), lr=ADAM_LR)
            optimizer = smp.DistributedOptimizer(adam)
        ids, mask = batch(step)
        optimizer.zero_grad()
        losses.append(float(train_step(wrapped, ids[fed], mask[fed]).reduce_mean()))
        optimizer.step()
        whole = wrapped.state_dict()
        if smp.rank() == 0:
            states.append({key: value.detach().cpu().clone() for key, value in whole.items()})
    if smp.rank() == 0:
        torch.save(states, out / f"{scenario}.pt")
    (out / f"{scenario}-rank-{smp.rank()}.json").write_text(
        json.dumps(
            {
                "losses": losses,
                "rows": [fed.start, fed.stop],
                "tp_rank": smp.tp_rank(),
                "rdp_rank": smp.rdp_rank(),
                "pp_rank": smp.pp_rank(),
            }
        )
    )


if __name__ == "__main__":
    main()
