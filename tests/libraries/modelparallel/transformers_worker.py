"""One rank of a model-parallel run on a transformers model, written as the seed's
``train_gpt_simple.py`` is: ``smp.DistributedModel`` around ``from_config``'s model,
``smp.DistributedOptimizer`` with a dynamic loss scale, ``@smp.step`` train and test steps
that take ``model(...)["loss"]``.

argv: output folder, then one scenario name or more, run one after another in the same
processes (the library's state made again for each: a job's processes start once). Rank 0
writes each scenario's whole state_dict; every rank its own part (``local_state_dict``)
and what it saw; some scenarios a checkpoint as well.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import smdistributed.modelparallel.torch as smp
import torch

from libraries.modelparallel import state as smp_state
from tests.libraries.modelparallel.transformers_workload import (
    LR,
    RESUMED,
    STACKS,
    STEPS,
    batch,
    model,
)

SCENARIOS: dict[str, tuple[str, dict[str, object]]] = {
    "gpt2_simple": ("gpt2", {"partitions": 2, "microbatches": 2, "pipeline": "simple"}),
    "gpt2_interleaved_ddp": ("gpt2", {"partitions": 2, "microbatches": 2, "ddp": True}),
    "gpt2_interleaved": ("gpt2", {"partitions": 2, "microbatches": 2}),
    "llama_simple": ("llama", {"partitions": 2, "microbatches": 2, "pipeline": "simple"}),
    "llama_interleaved": ("llama", {"partitions": 2, "microbatches": 4}),
    "llama_interleaved_ddp": ("llama", {"partitions": 2, "microbatches": 2, "ddp": True}),
    # The other families in 2 stages, under both schedules (BART: its encoder and decoder).
    "mistral_simple": ("mistral", {"partitions": 2, "microbatches": 2, "pipeline": "simple"}),
    "qwen2_interleaved": ("qwen2", {"partitions": 2, "microbatches": 2}),
    "opt_interleaved": ("opt", {"partitions": 2, "microbatches": 2}),
    "bart_simple": ("bart", {"partitions": 2, "microbatches": 2, "pipeline": "simple"}),
    "neox_interleaved": ("neox", {"partitions": 2, "microbatches": 2}),
    "bert_simple": ("bert", {"partitions": 2, "microbatches": 2, "pipeline": "simple"}),
    # ... and their states sharded over 2 ranks.
    **{
        f"{family}_sharded": (
            family,
            {"ddp": True, "microbatches": 2, "sharded_data_parallel_degree": 2},
        )
        for family in ("mistral", "qwen2", "opt", "bart", "neox", "bert")
    },
    # Each transformer block recomputes its activations in the backward pass.
    "gpt2_sharded_checkpointed": (
        "gpt2",
        {"ddp": True, "microbatches": 2, "sharded_data_parallel_degree": 2},
    ),
    "llama_sharded_checkpointed": (
        "llama",
        {"ddp": True, "microbatches": 2, "sharded_data_parallel_degree": 2},
    ),
    # Pipeline stages whose blocks recompute their activations in the backward pass.
    "gpt2_pipeline_checkpointed": (
        "gpt2",
        {"partitions": 2, "microbatches": 2, "pipeline": "simple"},
    ),
    # Made under smp.tensor_parallelism(): its decoder layers split over 2 ranks.
    "llama_tensor_parallel": ("llama", {"tensor_parallel_degree": 2, "microbatches": 2}),
    # GPT-2's fused query-key-value Conv1D split by heads; saved through DCP and resumed.
    "gpt2_tensor_parallel": ("gpt2", {"tensor_parallel_degree": 2, "microbatches": 2}),
    # ... and two such replicas (2 x 2 over 2 instances), with a checkpointed block.
    "llama_tensor_parallel_ddp": (
        "llama",
        {"tensor_parallel_degree": 2, "ddp": True, "microbatches": 2},
    ),
    # GPT-2 split over 2 ranks, and its states sharded over the 2 such groups (FSDP2 on
    # the tensor-parallel parameters), each block recomputing its activations.
    "gpt2_tensor_parallel_sharded_checkpointed": (
        "gpt2",
        {
            "tensor_parallel_degree": 2,
            "sharded_data_parallel_degree": 2,
            "ddp": True,
            "microbatches": 2,
        },
    ),
    # Tensor parallelism inside pipeline stages: 2 stages, each split over 2 ranks.
    "gpt2_tensor_parallel_pipeline": (
        "gpt2",
        {"tensor_parallel_degree": 2, "partitions": 2, "microbatches": 2, "pipeline": "simple"},
    ),
    "llama_tensor_parallel_pipeline": (
        "llama",
        {"tensor_parallel_degree": 2, "partitions": 2, "microbatches": 2},
    ),
    # ... and two such replicas (tp x pp x dp: 8 processes on 2 instances).
    "llama_tensor_parallel_pipeline_ddp": (
        "llama",
        {"tensor_parallel_degree": 2, "partitions": 2, "microbatches": 2, "ddp": True},
    ),
    # A new run of the GPT-2 one, resumed from its checkpoint before its first step.
    "gpt2_tensor_parallel_pipeline_resumed": (
        "gpt2",
        {"tensor_parallel_degree": 2, "partitions": 2, "microbatches": 2, "pipeline": "simple"},
    ),
    # Plain replicas resumed from the tensor-parallel checkpoints: another layout.
    "gpt2_replicated_from_tensor_parallel": ("gpt2", {"ddp": True, "microbatches": 2}),
    "gpt2_replicated_from_tensor_parallel_pipeline": ("gpt2", {"ddp": True, "microbatches": 2}),
    # Nothing marked for tensor parallelism: each rank the whole model, replicas in step.
    "llama_tensor_parallel_unmarked": (
        "llama",
        {"tensor_parallel_degree": 2, "ddp": True, "microbatches": 2},
    ),
}


# Scenarios that save a checkpoint (torch.distributed.checkpoint) and resume from it.
CHECKPOINTED = {
    "gpt2_tensor_parallel",
    "gpt2_tensor_parallel_pipeline",
    "llama_tensor_parallel",
    "llama_tensor_parallel_pipeline",
    "gpt2_tensor_parallel_sharded_checkpointed",
}


@smp.step
def train_step(
    model: smp.DistributedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]
    model.backward(loss)
    return loss


@smp.step
def test_step(
    model: smp.DistributedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    return model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]


def exchange() -> dict[str, object]:
    """What each rank hears from the first of its tensor-parallel group (smp.broadcast /
    smp.recv_from), with a barrier of its model-parallel group (every stage's ranks)."""
    heard: dict[str, object] = {}
    if smp.tp_rank() == 0:
        smp.broadcast({"from": smp.rank()}, smp.TP_GROUP)
    else:
        heard["tp"] = smp.recv_from(0, smp.RankType.TP_RANK)["from"]
    smp.mp_barrier()
    return heard


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


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
    if "tensor_parallel_degree" in config and not scenario.endswith("_unmarked"):
        with smp.tensor_parallelism():
            net = model(family)
        if scenario.endswith("_ddp"):
            smp.set_activation_checkpointing(net.model.layers[1])
    else:
        net = model(family)
    # How often the blocks run (recomputation included), where no pipeline traces them.
    block_forwards = [0]

    def count(*_: object) -> None:
        block_forwards[0] += 1

    for block in net.get_submodule(STACKS[family]):
        if "partitions" not in config:
            block.register_forward_pre_hook(count)
        if scenario.endswith("_checkpointed"):
            smp.set_activation_checkpointing(block)
    wrapped = smp.DistributedModel(net, trace_device="gpu")
    optimizer = smp.DistributedOptimizer(
        torch.optim.Adam(wrapped.parameters(), lr=LR),
        static_loss_scale=None,
        dynamic_loss_scale=True,
        dynamic_loss_args={"scale_window": 1000, "min_scale": 1, "delayed_shift": 2},
    )
    per_replica = batch(0)[0].shape[0] // smp.dp_size()
    rows = slice(smp.dp_rank() * per_replica, (smp.dp_rank() + 1) * per_replica)
    wrapped.train()
    first, last = 0, STEPS
    stage_blocks = 0
    if scenario in RESUMED:
        # As scripts resume: before the first step, so before any stage is built; then
        # one step more, which needs the optimizer's moments as they were saved.
        smp.resume_from_checkpoint(out / f"{RESUMED[scenario]}-checkpoint")
        first, last = STEPS, STEPS + 1
    for step in range(first, last):
        ids, mask = batch(step)
        optimizer.zero_grad()
        losses = train_step(wrapped, ids[rows], mask[rows])
        optimizer.step()
        if step == first and wrapped.pipeline is not None:
            # The stage runs its own traced blocks: counted from the second step on.
            for name, block in wrapped.pipeline.module.named_modules():
                if name.rpartition(".")[0] == STACKS[family]:
                    block.register_forward_pre_hook(count)
                    stage_blocks += 1
    trained_forwards = block_forwards[0]
    if scenario in CHECKPOINTED:
        # Saved, moved on a step, and resumed: what is kept is what was saved.
        folder = out / f"{scenario}-checkpoint"
        smp.save_checkpoint(folder, tag="trained", user_content={"steps": STEPS})
        train_step(wrapped, *(part[rows] for part in batch(STEPS + 1)))
        optimizer.step()
        resumed = smp.resume_from_checkpoint(folder)
        assert resumed == {"steps": STEPS}, resumed
    heard = exchange() if scenario == "gpt2_tensor_parallel_pipeline" else {}
    wrapped.eval()
    with torch.no_grad():
        # A held-out batch of another size: stages of their own, sharing the parameters.
        held_out = test_step(
            wrapped, *(part[: 2 * config["microbatches"]] for part in batch(STEPS))
        )
    whole = wrapped.state_dict()
    if smp.rank() == 0:
        torch.save(whole, out / f"{scenario}.pt")
    if "partitions" in config:
        torch.save(wrapped.local_state_dict(), out / f"{scenario}-rank-{smp.rank()}-part.pt")
    (out / f"{scenario}-rank-{smp.rank()}.json").write_text(
        json.dumps(
            {
                "loss": float(losses.reduce_mean()),
                "block_forwards": trained_forwards,
                "stage_blocks": stage_blocks,
                "held_out_loss": float(held_out.reduce_mean()),
                "optimizer_parameters": sum(
                    len(group["params"]) for group in optimizer.param_groups
                ),
                "parameter_bytes": sum(
                    _local(p).numel() * p.element_size() for p in wrapped.module.parameters()
                ),
                "heard": heard,
                "mp_rank": smp.mp_rank(),
                "mp_size": smp.mp_size(),
                "tp_rank": smp.tp_rank(),
                "rdp_rank": smp.rdp_rank(),
                "pp_rank": smp.pp_rank(),
                "dp_rank": smp.dp_rank(),
            }
        )
    )


if __name__ == "__main__":
    main()
