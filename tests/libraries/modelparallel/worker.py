"""One rank of a model-parallel correctness run, written as a SageMaker script is: the
parameters come from ``smp.init(config)``, the step is an ``@smp.step`` function.

argv: output folder, then one scenario name or more, run one after another in the same
processes (the library's state made again for each: a job's processes start once). Rank 0
writes the whole model's state_dict after training, and each rank the bytes of model state
it holds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import smdistributed.modelparallel.torch as smp
import torch

from libraries.modelparallel import state as smp_state
from tests.libraries.modelparallel.workload import (
    GLOBAL_BATCH,
    LR,
    POISONED_STEP,
    SCALE,
    STEPS,
    Block,
    Nested,
    batch,
    loss_of,
    model,
    poisoned,
    sequential,
)

SCENARIOS: dict[str, dict[str, object]] = {
    "replicated": {"ddp": True, "microbatches": 2},
    "sharded": {"ddp": True, "microbatches": 2, "sharded_data_parallel_degree": 2},
    "sharded_checkpointed": {"ddp": True, "microbatches": 2, "sharded_data_parallel_degree": 2},
    "sharded_bf16": {"ddp": True, "sharded_data_parallel_degree": 2, "bf16": True},
    "sharded_resumed": {"ddp": True, "microbatches": 2, "sharded_data_parallel_degree": 2},
    "replicated_fp16": {"ddp": True, "microbatches": 2, "fp16": True},
    "replicated_fp16_overflow": {"ddp": True, "fp16": True},
    "pipeline_interleaved": {"ddp": True, "partitions": 2, "microbatches": 4},
    "pipeline_resumed": {"ddp": True, "partitions": 2, "microbatches": 4},
    "pipeline_simple": {"partitions": 2, "microbatches": 2, "pipeline": "simple"},
    "pipeline_fp16": {"partitions": 2, "microbatches": 2, "fp16": True},
    "pipeline_manual": {"partitions": 2, "microbatches": 2, "auto_partition": False},
    # The model as one nn.Sequential: its items are the stack.
    "pipeline_sequential": {"partitions": 2, "microbatches": 2, "pipeline": "simple"},
    # The model as a tree of attributes, an nn.ModuleDict and nested nn.Sequentials.
    "pipeline_nested": {"partitions": 2, "microbatches": 2},
    # Made under smp.model_creation(), which delays as the job's parameter says.
    "sharded_delayed": {
        "ddp": True,
        "microbatches": 2,
        "sharded_data_parallel_degree": 2,
        "delayed_parameter_initialization": True,
    },
    # Made under smp.delay_param_initialization().
    "pipeline_delayed": {"partitions": 2, "microbatches": 2, "pipeline": "simple"},
    # torch's autocast in fp16 with smp.amp.GradScaler, as scripts without "fp16" use it.
    "replicated_grad_scaler": {"ddp": True, "microbatches": 2},
}
# Scenarios that save a checkpoint after their first step, and those that resume from it.
SAVES = {"sharded": "checkpoints", "pipeline_interleaved": "pipeline-checkpoints"}
RESUMES = {"sharded_resumed": "checkpoints", "pipeline_resumed": "pipeline-checkpoints"}
# Loss scales to start from: one that fits fp16, one that overflows it on every step.
INITIAL_SCALE = {"replicated_fp16_overflow": 2.0**60}


@smp.step
def train_step(model: smp.DistributedModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = loss_of(model(x), y)
    model.backward(loss)
    return loss


@smp.step(non_split_inputs=["scaler"])
def scaled_train_step(
    model: smp.DistributedModel, x: torch.Tensor, y: torch.Tensor, scaler: smp.amp.GradScaler
) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.float16):
        loss = loss_of(model(x), y)
    model.backward(scaler.scale(loss))
    return loss


@smp.step
def evaluate(model: smp.DistributedModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return loss_of(model(x), y)


def exchange() -> dict[str, object]:
    """What each rank hears from the first of its pipeline group and of its data-parallel
    group (smp.broadcast / smp.recv_from), with every kind of barrier between."""
    heard: dict[str, object] = {}
    smp.barrier()
    if smp.pp_rank() == 0:
        smp.broadcast({"from": smp.rank()}, smp.PP_GROUP)
    else:
        heard["pp"] = smp.recv_from(0, smp.RankType.PP_RANK)["from"]
    smp.mp_barrier()
    if smp.dp_rank() == 0:
        smp.broadcast({"from": smp.rank()}, smp.DP_GROUP)
    else:
        heard["dp"] = smp.recv_from(0, smp.RankType.DP_RANK)["from"]
    smp.dp_barrier()
    return heard


def held_bytes(net: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Model states on this rank: parameters, gradients and optimizer state (local shards)."""

    def local(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to_local() if hasattr(tensor, "to_local") else tensor

    total = 0
    for parameter in net.parameters():
        total += local(parameter).numel() * local(parameter).element_size()
        if parameter.grad is not None:
            total += local(parameter.grad).numel() * local(parameter.grad).element_size()
    for per_parameter in optimizer.state.values():
        for value in per_parameter.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                total += local(value).numel() * local(value).element_size()
    return total


def main() -> None:
    out, scenarios = Path(sys.argv[1]), sys.argv[2:]
    for index, scenario in enumerate(scenarios):
        if index:
            # The scenario before is done on every rank: its state goes, a new one is made.
            smp.barrier()
            smp_state.reset()
        Block.runs = 0
        run(out, scenario)


def run(out: Path, scenario: str) -> None:
    smp.init(SCENARIOS[scenario])
    if scenario == "pipeline_manual":
        # As scripts place modules: everything made inside goes to stage 0, then the
        # last block to stage 1 (the head, after the stack, goes with the last stage).
        with smp.partition(0):
            net = model()
        smp.set_partition(net.blocks[2], 1)
    elif scenario == "sharded_delayed":
        with smp.model_creation():
            net = model()
    elif scenario == "pipeline_delayed":
        with smp.delay_param_initialization(enabled=True):
            net = model()
    elif scenario == "pipeline_sequential":
        net = sequential()
    elif scenario == "pipeline_nested":
        net = Nested()
    else:
        net = model()
    # Parameter bytes the script's model holds before it is wrapped.
    made_bytes = sum(p.numel() * p.element_size() for p in net.parameters() if not p.is_meta)
    if scenario == "sharded_checkpointed":
        for block in net.blocks:
            smp.set_activation_checkpointing(block)
    wrapped = smp.DistributedModel(net)
    optimizer = smp.DistributedOptimizer(
        torch.optim.Adam(wrapped.parameters(), lr=LR),
        static_loss_scale=None,
        dynamic_loss_scale=True,
        dynamic_loss_args={
            "init_scale": INITIAL_SCALE.get(scenario, 2.0**10),
            "scale_window": 1000,
            "min_scale": 1,
        },
    )
    per_replica = GLOBAL_BATCH // smp.dp_size()
    rows = slice(smp.dp_rank() * per_replica, (smp.dp_rank() + 1) * per_replica)
    first = 0
    if scenario in RESUMES:
        # As scripts resume: before the first step, so before any pipeline is built.
        first = int(smp.resume_from_checkpoint(out / RESUMES[scenario])["step"]) + 1
    scaler = smp.amp.GradScaler(init_scale=SCALE, growth_interval=1000)
    scales, moved = [], []
    for step in range(first, STEPS):
        x, y = batch(step)
        optimizer.zero_grad()
        if scenario == "replicated_grad_scaler":
            if step == POISONED_STEP:
                x = poisoned(x)
            before = [p.detach().clone() for p in wrapped.parameters()]
            losses = scaled_train_step(wrapped, x[rows], y[rows], scaler)
            scaler.step(optimizer)
            scaler.update()
            scales.append(scaler.get_scale())
            after = list(wrapped.parameters())
            moved.append(any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)))
        else:
            losses = train_step(wrapped, x[rows], y[rows])
            optimizer.step()
        if scenario in SAVES and step == 0:
            # What a later run resumes from (the RESUMES scenarios).
            smp.save_checkpoint(out / SAVES[scenario], tag="step-0", user_content={"step": 0})
    if scenario.startswith("pipeline"):
        # A stage's own part saves and loads back.
        smp.save(wrapped.local_state_dict(), out / f"{scenario}-part.pt")
        wrapped.load_state_dict(smp.load(out / f"{scenario}-part.pt"))
    exchanged = exchange() if scenario == "pipeline_interleaved" else {}
    trained_forwards = Block.runs
    with torch.no_grad():
        held_out = evaluate(wrapped, *batch(STEPS))
    whole = wrapped.state_dict()
    if smp.rank() == 0:
        torch.save(whole, out / f"{scenario}.pt")
    (out / f"{scenario}-rank-{smp.rank()}.json").write_text(
        json.dumps(
            {
                "held_bytes": held_bytes(wrapped.module, optimizer.optimizer),
                "made_bytes": made_bytes,
                "scales": scales,
                "moved": moved,
                "loss": float(losses.reduce_mean()),
                "microbatches": len(losses),
                "block_forwards": trained_forwards,
                "loss_scale": optimizer.loss_scale,
                "held_out_loss": float(held_out.reduce_mean()),
                "optimizer_parameters": sum(
                    len(group["params"]) for group in optimizer.param_groups
                ),
                "exchanged": exchanged,
                "pp_rank": smp.pp_rank(),
                "dp_rank": smp.dp_rank(),
            }
        )
    )


if __name__ == "__main__":
    main()
