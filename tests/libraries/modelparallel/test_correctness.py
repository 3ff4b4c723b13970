"""Runyard's model-parallel library against one-process training on the global batch:
replicated and sharded (two MiCS groups of 2 over 4 processes on 2 instances), with
activation checkpointing, bf16, delayed parameter initialisation and a resume from a
sharded checkpoint; pipelines of 2 stages (simple on one instance, also with delayed
parameter initialisation; interleaved with 2 replicas on 2 instances, and a resume from
its checkpoint); torch's fp16 autocast with ``smp.amp.GradScaler`` against torch's own
scaler. Each run is real processes placed as mpirun places them, importing
``smdistributed.modelparallel.torch``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.libraries.dataparallel.launch import Layout, run_job
from tests.libraries.modelparallel.workload import (
    POISONED_STEP,
    STEPS,
    nested_key,
    scaled_reference,
    sequential_key,
    single_process_reference,
)

# The module's fixture runs 17 scenarios in 2 jobs of 2 and 4 processes before the first
# test.
pytestmark = pytest.mark.timeout(900)

# float32 with another summation order: a few ulps.
EXACT = {"atol": 1e-6, "rtol": 1e-5}
# bf16 compute keeps 8 bits of mantissa; 3 Adam steps of 0.01 move parameters ~0.03.
BF16 = {"atol": 5e-3, "rtol": 0.0}
# fp16 keeps 11 bits: closer than bf16.
FP16 = {"atol": 1e-3, "rtol": 0.0}
LAYOUT = Layout.blocks(instances=2, per_instance=2)
# A pipeline of 2 stages on one instance.
ONE_INSTANCE = Layout.blocks(instances=1, per_instance=2)
LAYOUTS = {
    "pipeline_simple": ONE_INSTANCE,
    "pipeline_fp16": ONE_INSTANCE,
    "pipeline_manual": ONE_INSTANCE,
    "pipeline_delayed": ONE_INSTANCE,
    "pipeline_sequential": ONE_INSTANCE,
    "pipeline_nested": ONE_INSTANCE,
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("modelparallel")
    # Scenarios of one layout share a job's processes, one after another: "sharded" saves
    # the checkpoint "sharded_resumed" starts from, "pipeline_interleaved" the one
    # "pipeline_resumed" starts from.
    jobs: dict[Layout, list[str]] = {}
    for scenario in [
        "replicated",
        "sharded",
        "sharded_checkpointed",
        "sharded_bf16",
        "sharded_resumed",
        "replicated_fp16",
        "replicated_fp16_overflow",
        "pipeline_interleaved",
        "pipeline_resumed",
        "pipeline_simple",
        "pipeline_fp16",
        "pipeline_manual",
        "sharded_delayed",
        "pipeline_delayed",
        "replicated_grad_scaler",
        "pipeline_sequential",
        "pipeline_nested",
    ]:
        jobs.setdefault(LAYOUTS.get(scenario, LAYOUT), []).append(scenario)
    for layout, scenarios in jobs.items():
        run_job(
            ["-m", "tests.libraries.modelparallel.worker", str(out), *scenarios],
            layout,
            style="open_mpi",
            compat=True,
            timeout=120 * len(scenarios),
        )
    return out


def _params(runs: Path, scenario: str) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(runs / f"{scenario}.pt")
    return {key: value.float() for key, value in state.items()}


def _ranks(runs: Path, scenario: str) -> list[dict[str, Any]]:
    return [
        json.loads((runs / f"{scenario}-rank-{rank}.json").read_text())
        for rank in range(len(LAYOUTS.get(scenario, LAYOUT).hosts))
    ]


@pytest.mark.parametrize(
    "scenario",
    [
        "replicated",
        "sharded",
        "sharded_checkpointed",
        "sharded_resumed",
        "pipeline_interleaved",
        "pipeline_resumed",
        "pipeline_simple",
        "pipeline_manual",
        "sharded_delayed",
        "pipeline_delayed",
    ],
)
def test_follows_one_process_training_on_the_global_batch(runs: Path, scenario: str) -> None:
    reference = single_process_reference()
    got = _params(runs, scenario)
    assert got.keys() == reference.keys()
    for key in reference:
        torch.testing.assert_close(got[key], reference[key], **EXACT)


@pytest.mark.parametrize(
    ("scenario", "renamed"),
    [("pipeline_sequential", sequential_key), ("pipeline_nested", nested_key)],
)
def test_a_model_of_other_containers_follows_one_process_training(
    runs: Path, scenario: str, renamed: Callable[[str], str]
) -> None:
    reference = single_process_reference()
    got = {renamed(key): value for key, value in _params(runs, scenario).items()}
    assert got.keys() == reference.keys()
    for key in reference:
        torch.testing.assert_close(got[key], reference[key], **EXACT)
    # Both stages held and stepped some of its modules.
    held = [rank["optimizer_parameters"] for rank in _ranks(runs, scenario)]
    assert sum(held) == 10
    assert min(held) >= 2


def test_pipeline_stages_hold_and_step_their_own_blocks(runs: Path) -> None:
    ranks = _ranks(runs, "pipeline_interleaved")
    # placement "cluster": a replica's two stages are adjacent ranks, on one instance.
    assert [(rank["pp_rank"], rank["dp_rank"]) for rank in ranks] == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
    ]
    # Each optimizer steps its stage's parameters only: together, the model's 10 tensors
    # (embed, 3 blocks and the head, a weight and a bias each), every one on one stage.
    first, second = ranks[0]["optimizer_parameters"], ranks[1]["optimizer_parameters"]
    assert [rank["optimizer_parameters"] for rank in ranks] == [first, second] * 2
    assert first + second == 10
    assert min(first, second) >= 4
    # ... and holds only its stage's states: parameters of the others are given back, so
    # a replica's two stages together hold what one whole replica does.
    whole = _ranks(runs, "replicated")[0]["held_bytes"]
    assert ranks[0]["held_bytes"] + ranks[1]["held_bytes"] == whole
    assert max(rank["held_bytes"] for rank in ranks) < whole
    assert {rank["microbatches"] for rank in ranks} == {4}
    # Every rank's step output and evaluation came from the last stage of its replica.
    assert len({rank["loss"] for rank in ranks}) == 2
    assert len({rank["held_out_loss"] for rank in ranks}) == 1


def test_ranks_hear_the_first_of_their_groups(runs: Path) -> None:
    # ranks 0, 1 are replica 0's stages 0, 1; ranks 2, 3 replica 1's.
    heard = [rank["exchanged"] for rank in _ranks(runs, "pipeline_interleaved")]
    assert heard == [{}, {"pp": 0}, {"dp": 0}, {"pp": 2, "dp": 1}]


def test_manual_placement_puts_the_marked_blocks_on_their_stages(runs: Path) -> None:
    # smp.partition(0) around the model, then set_partition(blocks[2], 1): stage 0 holds
    # embed, blocks 0 and 1 (6 tensors), stage 1 block 2 and the head (4).
    ranks = _ranks(runs, "pipeline_manual")
    assert [rank["optimizer_parameters"] for rank in ranks] == [6, 4]


def test_a_pipeline_in_fp16_stays_close(runs: Path) -> None:
    reference = single_process_reference()
    got = _params(runs, "pipeline_fp16")
    for key in reference:
        torch.testing.assert_close(got[key], reference[key], **FP16)
    assert any(not torch.equal(got[key], reference[key]) for key in reference)


def test_bf16_stays_close_and_really_rounds(runs: Path) -> None:
    reference = single_process_reference()
    got = _params(runs, "sharded_bf16")
    for key in reference:
        torch.testing.assert_close(got[key], reference[key], **BF16)
    assert any(not torch.equal(got[key], reference[key]) for key in reference)


def test_fp16_with_a_dynamic_loss_scale_stays_close(runs: Path) -> None:
    reference = single_process_reference()
    got = _params(runs, "replicated_fp16")
    for key in reference:
        torch.testing.assert_close(got[key], reference[key], **FP16)
    assert any(not torch.equal(got[key], reference[key]) for key in reference)
    assert {rank["loss_scale"] for rank in _ranks(runs, "replicated_fp16")} == {2.0**10}


def test_fp16_overflow_skips_the_step_on_every_rank_and_lowers_the_scale(runs: Path) -> None:
    # Every step overflowed: no rank moved a parameter, and the scale halved each time.
    untrained = single_process_reference(steps=0)
    got = _params(runs, "replicated_fp16_overflow")
    for key in untrained:
        torch.testing.assert_close(got[key], untrained[key], atol=0.0, rtol=0.0)
    scales = {rank["loss_scale"] for rank in _ranks(runs, "replicated_fp16_overflow")}
    assert scales == {2.0**60 / 2**STEPS}


def test_each_step_ran_its_microbatches_on_every_replica(runs: Path) -> None:
    ranks = _ranks(runs, "sharded")
    assert [rank["dp_rank"] for rank in ranks] == [0, 1, 2, 3]
    assert {rank["microbatches"] for rank in ranks} == {2}


def test_sharding_holds_half_the_model_states_per_rank(runs: Path) -> None:
    replicated = _ranks(runs, "replicated")[0]["held_bytes"]
    for rank in _ranks(runs, "sharded"):
        assert rank["held_bytes"] <= 1.1 * replicated / 2, (rank, replicated)


def test_activation_checkpointing_recomputes_each_block(runs: Path) -> None:
    # 3 blocks x 2 microbatches x steps: once forward; once more in backward when checkpointed.
    plain = _ranks(runs, "sharded")[0]["block_forwards"]
    assert plain == 3 * 2 * STEPS
    assert _ranks(runs, "sharded_checkpointed")[0]["block_forwards"] == 2 * plain


def test_delayed_parameters_are_made_only_where_they_are_held(runs: Path) -> None:
    # Made on the meta device: no parameter bytes before smp.DistributedModel; after it,
    # a rank holds its shards (sharded) or its stage (pipeline) and nothing else.
    whole = _ranks(runs, "replicated")[0]["held_bytes"]
    sharded, stages = _ranks(runs, "sharded_delayed"), _ranks(runs, "pipeline_delayed")
    assert {rank["made_bytes"] for rank in [*sharded, *stages]} == {0}
    assert _ranks(runs, "replicated")[0]["made_bytes"] > 0
    assert all(rank["held_bytes"] <= 1.1 * whole / 2 for rank in sharded)
    assert sum(rank["held_bytes"] for rank in stages) == whole
    assert max(rank["held_bytes"] for rank in stages) < whole


def test_grad_scaler_skips_the_inf_step_on_every_rank_as_torchs_does(runs: Path) -> None:
    reference, reference_scales = scaled_reference()
    ranks = _ranks(runs, "replicated_grad_scaler")
    # Only the last replica's batch held the inf: every replica skipped that step (and
    # only that one), and halved the scale as torch's scaler did.
    moved = [step != POISONED_STEP for step in range(STEPS)]
    assert [rank["moved"] for rank in ranks] == [moved] * len(ranks)
    assert [rank["scales"] for rank in ranks] == [reference_scales] * len(ranks)
    assert reference_scales[POISONED_STEP] == reference_scales[0] / 2
    got = _params(runs, "replicated_grad_scaler")
    for key in reference:
        torch.testing.assert_close(got[key], reference[key], **FP16)
