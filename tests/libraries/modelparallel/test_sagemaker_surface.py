"""The parts of SageMaker's model-parallel API that its GPT-2 example
(``train_gpt_simple.py``) uses beyond the library's core: ``smp.init``'s own config under
the job's parameters, ``smp.nn`` (``FusedLayerNorm``, GPT-2's state_dict translations),
the distributed transformer's names on transformers' GPT-2, activation checkpointing of a
stack with a strategy, post-partition hooks, the group getters, the fp16 optimizer's
``clip_master_grads`` and ``overflow``, and full checkpoints. Where a process group is
needed, real processes placed as mpirun places them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from contract import modelparallel
from libraries.modelparallel import distributed_names, marks
from libraries.modelparallel.nn import FusedLayerNorm
from libraries.modelparallel.nn.huggingface import gpt2
from tests.libraries.dataparallel.launch import Layout, run_job
from tests.libraries.modelparallel.transformers_workload import batch, loss_of, model

TWO = Layout.blocks(instances=1, per_instance=2)
# The bound of the workers' second clipping call: below the first step's gradient norm.
CLIP_TO = 0.05
# What the job's distribution says of each run (SM_HP_MP_PARAMETERS).
JOB_PARAMETERS: dict[str, dict[str, Any]] = {
    "replicated": {"ddp": True, "microbatches": 2},
    "tensor_parallel": {"tensor_parallel_degree": 2, "microbatches": 2},
    "pipeline": {"partitions": 2, "microbatches": 2, "auto_partition": False},
}


def test_the_jobs_parameters_win_over_the_scripts_under_either_name() -> None:
    script = {"microbatches": 1, "pipeline_parallel_degree": 1, "fp16": True, "ddp": True}
    job = {"partitions": 2, "fp16": False}
    assert modelparallel.under(job, script) == {
        "microbatches": 1,
        "ddp": True,
        "partitions": 2,
        "fp16": False,
    }
    assert modelparallel.under({}, script) == script


def test_a_job_that_leaves_microbatches_to_its_script_is_taken_and_checked_at_init() -> None:
    # The example's notebook gives partitions; its script's smp.init gives microbatches.
    job = {"partitions": 2, "ddp": True}
    assert modelparallel.problems(job, 2, ("parameters",), final=False) == []
    found = modelparallel.problems(job, 2, ("parameters",))
    assert [problem.loc for problem in found] == [("parameters", "microbatches")]
    merged = modelparallel.under(job, {"microbatches": 2})
    assert modelparallel.problems(merged, 2, ("parameters",)) == []
    # Given by the job itself, too few is refused at submission.
    given = {**job, "microbatches": 1}
    assert modelparallel.problems(given, 2, ("parameters",), final=False) != []


@pytest.mark.parametrize("name", ["static_mode", "fast_mode"])
def test_the_examples_pipeline_switches_run_only_off(name: str) -> None:
    assert modelparallel.problems({name: False}, 1, ("parameters",)) == []
    found = modelparallel.problems({name: True}, 1, ("parameters",))
    assert [problem.loc for problem in found] == [("parameters", name)]


def test_fused_layer_norm_is_what_a_transformers_gpt2_normalises_with() -> None:
    net = model("gpt2")
    norms = [m for m in net.modules() if isinstance(m, FusedLayerNorm)]
    assert len(norms) == 2 * 4 + 1  # two per block, and the last
    assert FusedLayerNorm(8, eps=1e-5).normalized_shape == (8,)


def test_gpt2_translations_load_strictly_and_copy() -> None:
    state = model("gpt2").state_dict()
    ours = gpt2.translate_hf_state_dict_to_smdistributed_gpt2(state)
    back = gpt2.translate_state_dict_to_hf_gpt2(ours, max_seq_len=16)
    assert back is not state
    assert back.keys() == state.keys()
    fresh = transformers.GPT2LMHeadModel(model("gpt2").config)
    fresh.load_state_dict(back, strict=True)
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_a_gpt2_marked_for_tensor_parallelism_has_the_distributed_transformers_names() -> None:
    net = model("gpt2")
    before = list(net.state_dict())
    # Marked by its closest marked ancestor, the model itself.
    assert distributed_names.give(net, {id(net): True}) == ["transformer"]
    transformer = net.transformer
    assert transformer.seq_layers is transformer.h
    assert [block.attention for block in transformer.seq_layers] == [
        block.attn for block in transformer.h
    ]
    assert [block.output for block in transformer.h] == [block.mlp for block in transformer.h]
    # Names, not modules: parameters and state_dicts are transformers' own.
    assert list(net.state_dict()) == before
    assert "transformer.seq_layers.0.attn.c_attn.weight" not in dict(net.named_parameters())
    unmarked = model("gpt2")
    assert distributed_names.give(unmarked, {id(unmarked.transformer): False}) == []
    assert not hasattr(unmarked.transformer, "seq_layers")


def test_checkpointing_a_stack_checkpoints_each_layer_and_strategies_are_checked() -> None:
    stack = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)])
    for strategy in ("each", "contiguous", "group_2"):
        assert marks._checkpointed_layers(stack, strategy) == list(stack)
    with pytest.raises(ValueError, match="strategy must be each, contiguous or group_<n>"):
        marks._checkpointed_layers(stack, "group_0")
    with pytest.raises(ValueError, match="not to Linear"):
        marks._checkpointed_layers(stack[0], "group_2")
    assert marks._checkpointed_layers(stack[0], "each") == [stack[0]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    seen = {}
    for scenario, parameters in JOB_PARAMETERS.items():
        out = tmp_path_factory.mktemp(scenario)
        run_job(
            [
                "-m",
                "tests.libraries.modelparallel.surface_worker",
                str(out),
                scenario,
                str(CLIP_TO),
            ],
            TWO,
            style="open_mpi",
            compat=True,
            extra_env={"SM_HP_MP_PARAMETERS": json.dumps(parameters)},
            timeout=240,
        )
        seen[scenario] = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return seen


def _reference_norm() -> float:
    """The gradient norm of one process's step on the global batch."""
    net = model("gpt2")
    loss_of(net, *batch(0)).backward()
    grads = [p.grad.reshape(-1) for p in net.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.cat(grads)))


@pytest.mark.parametrize("scenario", list(JOB_PARAMETERS))
def test_the_scripts_calls_run_under_the_jobs_parameters(
    runs: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    for rank, seen in enumerate(runs[scenario]):
        assert seen["version"] == "1.15.0"
        assert seen["microbatches"] == 2  # the job's, not the script's 1
        assert seen["seq_layers_is_h"]
        assert seen["attention_is_attn"]
        assert seen["layer_norms"] == 9
        # The hook ran once, after the first step's partition, with the optimizer.
        assert seen["hooks"] == [[True, True]]
        assert seen["overflow"] is False
        assert seen["world_group"] == [0, 1]
        assert seen["group_sums"]["world"] == 3.0
        assert rank in seen["tp_group"]
        # Each process group holds the ranks its list names (ranks r count r + 1).
        for name in ("tp", "dp", "pp", "mp", "rdp"):
            assert seen["group_sums"][name] == sum(r + 1 for r in seen[f"{name}_group"]), name
    layouts = {
        "replicated": {"tp_group": [0], "dp_group": [0, 1], "pp_group": [0]},
        "tensor_parallel": {"tp_group": [0, 1], "dp_group": [0, 1], "rdp_group": [0]},
        "pipeline": {"pp_group": [0, 1], "dp_group": [0], "mp_group": [0, 1]},
    }[scenario]
    first = runs[scenario][0]
    assert {key: first[key] for key in layouts} == layouts


@pytest.mark.parametrize("scenario", list(JOB_PARAMETERS))
def test_activation_checkpointing_set_after_wrapping_reaches_every_layer(
    runs: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    held = [seen["checkpointed"] for seen in runs[scenario]]
    # Every block on each rank; in two stages, each stage its two.
    assert held == ([2, 2] if scenario == "pipeline" else [4, 4])


@pytest.mark.parametrize("scenario", list(JOB_PARAMETERS))
def test_clip_master_grads_clips_the_whole_models_gradient_norm(
    runs: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    reference = _reference_norm()
    assert reference > CLIP_TO
    for seen in runs[scenario]:
        assert seen["norm"] == pytest.approx(reference, rel=1e-4)
        assert seen["clipped_norm"] == pytest.approx(reference, rel=1e-4)
        assert seen["norm_after_clipping"] == pytest.approx(CLIP_TO, rel=1e-3)


def test_a_full_checkpoint_restores_the_model_and_its_user_content(
    runs: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    for seen in runs["replicated"]:
        assert seen["full_restored"] is True
        assert seen["full_user_content"] == {"at": 1}
