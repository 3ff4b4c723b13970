"""One rank of a run that calls SageMaker's model-parallel API as the seed's
``train_gpt_simple.py`` calls it: ``smp.init`` with a config of its own under the job's
parameters, a GPT-2 made in ``smp.model_creation`` with the script's keywords and reached
as ``transformer.seq_layers``, marks and hooks set after ``smp.DistributedModel``, the
fp16 optimizer's ``clip_master_grads``, the group getters, and full checkpoints.

argv: output folder, scenario name, the bound the second clipping call clips to. Every
rank writes what it saw as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import smdistributed.modelparallel
import smdistributed.modelparallel.torch as smp
import torch
import torch.distributed as dist
from smdistributed.modelparallel.torch.nn import FusedLayerNorm
from torch.distributed._composable.checkpoint_activation import checkpoint

from libraries.modelparallel import state as smp_state
from tests.libraries.modelparallel.transformers_workload import GLOBAL_BATCH, batch, model

# What the script's own smp.init config says of each run; the job's parameters
# (SM_HP_MP_PARAMETERS, set by the test) win where they say otherwise.
SCRIPT_CONFIG: dict[str, Any] = {
    "ddp": True,
    "microbatches": 1,
    "pipeline_parallel_degree": 1,
    "tensor_parallel_degree": 1,
    "shard_optimizer_state": False,
    "prescaled_batch": False,
    "fp16": False,
    "bf16": False,
    "offload_activations": False,
    "delayed_parameter_initialization": False,
    "optimize": "speed",
    "placement_strategy": "cluster",
    "activation_loading_horizon": 4,
    "skip_tracing": False,
    "auto_partition": True,
    "default_partition": 0,
    "static_mode": False,
    "fast_mode": False,
    "sharded_data_parallel_degree": 1,
}


def main(out: Path, scenario: str, clip_to: float) -> None:
    smp.init(SCRIPT_CONFIG)
    seen: dict[str, Any] = {
        "version": smdistributed.modelparallel.__version__,
        "microbatches": smp_state.current().parameters.microbatches,
        "tp_group": smp.get_tp_group(),
        "dp_group": smp.get_dp_group(),
        "pp_group": smp.get_pp_group(),
        "mp_group": smp.get_mp_group(),
        "rdp_group": smp.get_rdp_group(),
        "world_group": smp.get_world_group(),
    }
    seen["group_sums"] = {
        name: _summed(getter())
        for name, getter in [
            ("tp", smp.get_tp_process_group),
            ("dp", smp.get_dp_process_group),
            ("pp", smp.get_pp_process_group),
            ("mp", smp.get_mp_process_group),
            ("rdp", smp.get_rdp_process_group),
            ("world", smp.get_world_process_group),
        ]
    }
    with smp.model_creation(
        tensor_parallelism=True,
        dtype=torch.get_default_dtype(),
        attention_in_fp32=False,
        query_key_layer_scaling=True,
        fused_softmax=True,
        fused_dropout=False,
        fused_bias_gelu=True,
    ):
        net = model("gpt2")
    wrapped = smp.DistributedModel(net, trace_device="gpu", backward_passes_per_step=1)
    module = wrapped.get_module()
    layers = module.transformer.seq_layers
    seen["seq_layers_is_h"] = layers is module.transformer.h
    seen["attention_is_attn"] = all(block.attention is block.attn for block in layers)
    seen["layer_norms"] = sum(isinstance(m, FusedLayerNorm) for m in module.modules())
    if scenario == "pipeline":
        for index, block in enumerate(layers.children()):
            smp.set_partition(block, 0 if index < 2 else 1)
    smp.set_activation_checkpointing(layers, strategy="each")
    hooks: list[tuple[bool, bool]] = []
    wrapped.register_post_partition_hook(
        lambda model, optimizer: hooks.append((model is wrapped, optimizer is not None))
    )
    removed = wrapped.register_post_partition_hook(lambda model, optimizer: hooks.append((0, 0)))
    removed.remove()
    optimizer = smp.DistributedOptimizer(
        torch.optim.SGD(module.parameters(), lr=0.0),
        static_loss_scale=None,
        dynamic_loss_scale=True,
        dynamic_loss_args={"scale_window": 1000, "min_scale": 1, "delayed_shift": 2},
    )

    @smp.step
    def train_step(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = model(input_ids=ids, attention_mask=mask, labels=ids)["loss"]
        model.backward(loss)
        return loss

    ids, mask = batch(0)
    if scenario != "pipeline":
        # Each data-parallel (or tensor-parallel) rank feeds its own rows of the batch.
        share = GLOBAL_BATCH // smp.size()
        ids, mask = ids[smp.rank() * share :][:share], mask[smp.rank() * share :][:share]
    optimizer.zero_grad(set_to_none=True)
    train_step(wrapped, ids, mask)
    seen["hooks"] = hooks
    stage = wrapped.pipeline.module if wrapped.pipeline is not None else module
    seen["checkpointed"] = sum(checkpoint.state(m) is not None for m in stage.modules())
    seen["norm"] = float(optimizer.clip_master_grads(1e9))
    seen["clipped_norm"] = float(optimizer.clip_master_grads(clip_to))
    seen["norm_after_clipping"] = float(optimizer.clip_master_grads(1e9))
    optimizer.step()
    seen["overflow"] = optimizer.overflow
    if scenario == "replicated":
        _full_checkpoint(out, wrapped, seen)
    (out / f"rank{smp.rank()}.json").write_text(json.dumps(seen))
    smp.barrier()


def _summed(group: dist.ProcessGroup) -> float:
    """The sum of the ranks' (rank + 1) over ``group``: which ranks it holds."""
    value = torch.tensor([float(smp.rank() + 1)])
    dist.all_reduce(value, group=group)
    return float(value.item())


def _full_checkpoint(out: Path, wrapped: Any, seen: dict[str, Any]) -> None:
    """A full checkpoint and back, after the model was changed in between; partial
    checkpoints pruned to the newest one."""
    for tag in ("first", "second"):
        smp.save_checkpoint(out / "partial", tag=tag, num_kept_partial_checkpoints=1)
    smp.save_checkpoint(
        out / "full", tag="fullmodel.pt", partial=False, model=wrapped, user_content={"at": 1}
    )
    saved = {key: value.clone() for key, value in wrapped.state_dict().items()}
    with torch.no_grad():
        for parameter in wrapped.get_module().parameters():
            parameter.zero_()
    content = smp.resume_from_checkpoint(out / "full", tag="fullmodel.pt", partial=False)
    seen["full_user_content"] = content
    seen["full_restored"] = all(
        torch.equal(value, saved[key]) for key, value in wrapped.state_dict().items()
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]))
