"""Runyard's model-parallel library on transformers models built from their library's
default configurations, sizes shrunk (``use_cache`` on, ``ModelOutput``s, sdpa attention,
embeddings tied where the family ties them): GPT-2 and Llama in every layout; Mistral,
Qwen2, OPT, BART, GPT-NeoX and BERT in pipeline stages and sharded
(test_tensor_parallel_training splits every family by tensor parallelism). Driven as the
seed's ``train_gpt_simple.py`` drives SageMaker's: keyword inputs, the loss computed
inside the model and read from its ``ModelOutput``, a dynamic loss scale, a test step
without backward. Each run is real processes placed as mpirun places them, checked
against one-process training on the global batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from libraries.modelparallel.checkpoints import full_state_dict
from tests.libraries.dataparallel.launch import Layout, run_job
from tests.libraries.modelparallel.tensor_parallel_training import held_per_rank
from tests.libraries.modelparallel.transformers_workload import (
    RESUMED,
    STEPS,
    model,
    single_process_reference,
)

# The fixture runs its jobs (2 to 8 processes each) before the first test.
pytestmark = pytest.mark.timeout(2400)

# Adam turns the float noise of gradients that are zero in exact arithmetic (the bias of
# attention keys: softmax ignores a constant per query) into steps of up to ~1e-5.
CLOSE = {"atol": 1e-4, "rtol": 1e-4}
# OPT's Adam steps are the most sensitive to float noise (gradients near Adam's epsilon):
# one process on the global batch and one process on the same batch in 2 microbatches
# already differ by 3.3e-4 after 3 steps (in 8: 1.9e-4), where the other families'
# differ by 2.3e-5 or less.
CLOSE_FOR = {"opt": {"atol": 5e-4, "rtol": 1e-4}}
ONE_INSTANCE = Layout.blocks(instances=1, per_instance=2)
FOUR_ON_ONE = Layout.blocks(instances=1, per_instance=4)
SCENARIOS = {
    "gpt2_simple": ("gpt2", ONE_INSTANCE),
    "gpt2_interleaved_ddp": ("gpt2", Layout.blocks(instances=2, per_instance=2)),
    "gpt2_interleaved": ("gpt2", ONE_INSTANCE),
    "llama_simple": ("llama", ONE_INSTANCE),
    "llama_interleaved": ("llama", ONE_INSTANCE),
    "llama_interleaved_ddp": ("llama", Layout.blocks(instances=2, per_instance=2)),
    "mistral_simple": ("mistral", ONE_INSTANCE),
    "qwen2_interleaved": ("qwen2", ONE_INSTANCE),
    "opt_interleaved": ("opt", ONE_INSTANCE),
    "bart_simple": ("bart", ONE_INSTANCE),
    "neox_interleaved": ("neox", ONE_INSTANCE),
    "bert_simple": ("bert", ONE_INSTANCE),
    "mistral_sharded": ("mistral", ONE_INSTANCE),
    "qwen2_sharded": ("qwen2", ONE_INSTANCE),
    "opt_sharded": ("opt", ONE_INSTANCE),
    "bart_sharded": ("bart", ONE_INSTANCE),
    "neox_sharded": ("neox", ONE_INSTANCE),
    "bert_sharded": ("bert", ONE_INSTANCE),
    "llama_sharded_checkpointed": ("llama", ONE_INSTANCE),
    "gpt2_pipeline_checkpointed": ("gpt2", ONE_INSTANCE),
    "gpt2_sharded_checkpointed": ("gpt2", ONE_INSTANCE),
    "llama_tensor_parallel": ("llama", ONE_INSTANCE),
    "gpt2_tensor_parallel": ("gpt2", ONE_INSTANCE),
    "gpt2_tensor_parallel_sharded_checkpointed": (
        "gpt2",
        Layout.blocks(instances=2, per_instance=2),
    ),
    "llama_tensor_parallel_ddp": ("llama", Layout.blocks(instances=2, per_instance=2)),
    "llama_tensor_parallel_unmarked": ("llama", Layout.blocks(instances=2, per_instance=2)),
    "gpt2_tensor_parallel_pipeline": ("gpt2", FOUR_ON_ONE),
    "llama_tensor_parallel_pipeline": ("llama", FOUR_ON_ONE),
    "llama_tensor_parallel_pipeline_ddp": ("llama", Layout.blocks(instances=2, per_instance=4)),
    # After the scenario whose checkpoint each resumes from, for a 4th step: the same
    # layout, then plain replicas (GPT-2's fused query-key-value moments in the model's
    # order, whatever the layout that saved them).
    "gpt2_tensor_parallel_pipeline_resumed": ("gpt2", FOUR_ON_ONE),
    "gpt2_replicated_from_tensor_parallel": ("gpt2", ONE_INSTANCE),
    "gpt2_replicated_from_tensor_parallel_pipeline": ("gpt2", ONE_INSTANCE),
}
# Steps each scenario's model has taken, where not STEPS.
TRAINED = {
    "gpt2_tensor_parallel_pipeline_resumed": STEPS + 1,
    "gpt2_replicated_from_tensor_parallel": STEPS + 1,
    "gpt2_replicated_from_tensor_parallel_pipeline": STEPS + 1,
}
# The input embedding and the output projection of the families whose default
# configuration ties them (Llama's unties them).
TIED = {
    "gpt2": ("transformer.wte.weight", "lm_head.weight"),
    "opt": ("model.decoder.embed_tokens.weight", "lm_head.weight"),
    "bart": ("model.shared.weight", "lm_head.weight"),
    "bert": ("bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"),
}
UNTIED = {
    "llama": ("model.embed_tokens.weight", "lm_head.weight"),
    "neox": ("gpt_neox.embed_in.weight", "lm_head.weight"),
}


def _jobs() -> list[tuple[str, ...]]:
    """The scenarios each job runs, one after another in its processes: a job's processes
    each spend seconds of CPU importing torch and transformers before their first step,
    so scenarios of one layout share them. A scenario that resumes from another's
    checkpoint runs after it: in its layout's job when that one comes earlier (or is that
    job), else in a job of its layout at the end."""
    jobs: dict[tuple[Layout, bool], list[str]] = {}
    for scenario, (_, layout) in SCENARIOS.items():
        source = RESUMED.get(scenario)
        order = list(jobs)
        later = False
        if source is not None:
            source_job = next(key for key in order if source in jobs[key])
            own = (layout, False)
            later = own not in jobs or order.index(source_job) > order.index(own)
        jobs.setdefault((layout, later), []).append(scenario)
    return [tuple(scenarios) for scenarios in jobs.values()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("transformers")
    for scenarios in _jobs():
        layout = SCENARIOS[scenarios[0]][1]
        run_job(
            ["-m", "tests.libraries.modelparallel.transformers_worker", str(out), *scenarios],
            layout,
            style="open_mpi",
            compat=True,
            # A bound for a hung job, not a speed check: on a loaded 2-core machine an
            # 8-process job's imports alone take minutes.
            timeout=60 * max(len(layout.hosts), 4) * len(scenarios),
        )
    return out


def _ranks(runs: Path, scenario: str) -> list[dict[str, Any]]:
    count = len(SCENARIOS[scenario][1].hosts)
    return [json.loads((runs / f"{scenario}-rank-{r}.json").read_text()) for r in range(count)]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_follows_one_process_training_and_loads_into_a_fresh_model(
    runs: Path, scenario: str
) -> None:
    family = SCENARIOS[scenario][0]
    reference = single_process_reference(family, steps=TRAINED.get(scenario, STEPS))
    got: dict[str, torch.Tensor] = torch.load(runs / f"{scenario}.pt")
    assert got.keys() == reference.keys()
    for key in reference:
        torch.testing.assert_close(got[key], reference[key], **CLOSE_FOR.get(family, CLOSE))
    # The saved state_dict is the model's own: a fresh one loads it, strictly.
    fresh = model(family)
    fresh.load_state_dict(got, strict=True)


PIPELINED = [
    "gpt2_simple",
    "gpt2_interleaved",
    "gpt2_interleaved_ddp",
    "llama_simple",
    "llama_interleaved",
    "llama_interleaved_ddp",
    "gpt2_pipeline_checkpointed",
    "mistral_simple",
    "qwen2_interleaved",
    "opt_interleaved",
    "bart_simple",
    "neox_interleaved",
    "bert_simple",
    "gpt2_tensor_parallel_pipeline",
    "llama_tensor_parallel_pipeline",
    "llama_tensor_parallel_pipeline_ddp",
]


@pytest.mark.parametrize(
    "scenario", [scenario for scenario in PIPELINED if SCENARIOS[scenario][0] in TIED]
)
def test_tied_embeddings_are_one_value_on_every_stage_that_holds_them(
    runs: Path, scenario: str
) -> None:
    family, layout = SCENARIOS[scenario]
    embedding, head = TIED[family]
    reference = single_process_reference(family)[embedding]
    copies = []
    for rank in range(len(layout.hosts)):
        part = torch.load(runs / f"{scenario}-rank-{rank}-part.pt")
        copies += [part[name] for name in (embedding, head) if name in part]
    # The first stage embeds with it, the last projects onto the vocabulary with it.
    assert len(copies) >= 2 * (len(layout.hosts) // 2)
    for copy in copies:
        assert torch.equal(copy, copies[0])
    torch.testing.assert_close(copies[0], reference, **CLOSE_FOR.get(family, CLOSE))
    # ... and it trained: three steps moved it.
    assert not torch.equal(reference, single_process_reference(family, steps=0)[embedding])


@pytest.mark.parametrize(
    "scenario", [scenario for scenario in PIPELINED if SCENARIOS[scenario][0] in UNTIED]
)
def test_untied_embeddings_stay_apart_each_on_its_own_stage(runs: Path, scenario: str) -> None:
    family, layout = SCENARIOS[scenario]
    embedding, head = UNTIED[family]
    parts = [
        torch.load(runs / f"{scenario}-rank-{rank}-part.pt") for rank in range(len(layout.hosts))
    ]
    # The embedding on the first stage only, the head on the last only: no copies.
    assert [(embedding in part, head in part) for part in parts] == [
        (rank["pp_rank"] == 0, rank["pp_rank"] == 1) for rank in _ranks(runs, scenario)
    ]
    reference = single_process_reference(family)
    held_embedding = next(part[embedding] for part in parts if embedding in part)
    held_head = next(part[head] for part in parts if head in part)
    torch.testing.assert_close(held_embedding, reference[embedding], **CLOSE)
    torch.testing.assert_close(held_head, reference[head], **CLOSE)
    assert not torch.equal(held_embedding, held_head)


@pytest.mark.parametrize("scenario", PIPELINED)
def test_every_rank_hears_its_replicas_losses(runs: Path, scenario: str) -> None:
    ranks = _ranks(runs, scenario)
    # Each replica's stages report the loss its last stage computed; the held-out batch
    # (another size: stages traced again, sharing the parameters) is the same everywhere.
    by_replica: dict[int, set[float]] = {}
    for rank in ranks:
        by_replica.setdefault(rank["dp_rank"], set()).add(rank["loss"])
    assert all(len(losses) == 1 for losses in by_replica.values())
    assert len({rank["held_out_loss"] for rank in ranks}) == 1


@pytest.mark.parametrize(
    ("scenario", "runs_per_block"), [("gpt2_simple", 1), ("gpt2_pipeline_checkpointed", 2)]
)
def test_pipeline_stages_recompute_the_blocks_marked_for_activation_checkpointing(
    runs: Path, scenario: str, runs_per_block: int
) -> None:
    ranks = _ranks(runs, scenario)
    assert sum(rank["stage_blocks"] for rank in ranks) == 4
    # Counted from the second step: each stage's blocks x 2 microbatches x 2 steps, and
    # each once more in the backward pass where marked.
    for rank in ranks:
        assert rank["block_forwards"] == runs_per_block * rank["stage_blocks"] * 2 * (STEPS - 1)


@pytest.mark.parametrize(
    "scenario",
    [
        "gpt2_sharded_checkpointed",
        "llama_sharded_checkpointed",
        "gpt2_tensor_parallel_sharded_checkpointed",
    ],
)
def test_activation_checkpointing_recomputes_each_transformer_block(
    runs: Path, scenario: str
) -> None:
    # 4 blocks x 2 microbatches x 3 steps, and each once more in the backward pass.
    for rank in _ranks(runs, scenario):
        assert rank["block_forwards"] == 2 * 4 * 2 * STEPS


@pytest.mark.parametrize("family", ["mistral", "qwen2", "opt", "bart", "neox", "bert"])
def test_sharded_ranks_hold_half_the_model_and_step_on_their_own_rows(
    runs: Path, family: str
) -> None:
    ranks = _ranks(runs, f"{family}_sharded")
    whole = sum(p.numel() * p.element_size() for p in model(family).parameters())
    # Each of the 2 ranks holds its shard of every parameter: half, to a row's rounding.
    assert all(0.45 * whole <= rank["parameter_bytes"] <= 0.55 * whole for rank in ranks)
    # Both ranks are replicas (each its own rows): two data-parallel ranks, two losses.
    assert sorted(rank["dp_rank"] for rank in ranks) == [0, 1]
    assert len({rank["loss"] for rank in ranks}) == 2


@pytest.mark.parametrize(
    "scenario",
    [
        "gpt2_tensor_parallel",
        "llama_tensor_parallel",
        "gpt2_tensor_parallel_sharded_checkpointed",
        "gpt2_tensor_parallel_pipeline",
        "llama_tensor_parallel_pipeline",
    ],
)
def test_a_tensor_parallel_checkpoint_rebuilds_the_whole_model(runs: Path, scenario: str) -> None:
    family = SCENARIOS[scenario][0]
    reference = single_process_reference(family)
    # Each rank wrote its shards; torch's converter joins them, with no process group,
    # into the model's own state_dict (GPT-2's query, key and value in the model's order).
    rebuilt = full_state_dict(runs / f"{scenario}-checkpoint" / "trained")
    assert rebuilt.keys() == reference.keys()
    for key in reference:
        torch.testing.assert_close(rebuilt[key], reference[key], **CLOSE)


@pytest.mark.parametrize(
    "scenario",
    [
        "gpt2_tensor_parallel",
        "llama_tensor_parallel",
        "llama_tensor_parallel_ddp",
        "gpt2_tensor_parallel_sharded_checkpointed",
    ],
)
def test_tensor_parallel_ranks_hold_half_the_blocks_and_step_together(
    runs: Path, scenario: str
) -> None:
    family = SCENARIOS[scenario][0]
    ranks = _ranks(runs, scenario)
    # Adjacent ranks make a tensor-parallel group; replicas are the groups.
    assert [(rank["tp_rank"], rank["rdp_rank"]) for rank in ranks] == [
        (index % 2, index // 2) for index in range(len(ranks))
    ]
    # The blocks' projections are split in two; embeddings and norms whole.
    held = held_per_rank(family, 2)
    if "sharded" in scenario:
        # ... and each rank holds about half of its group's share (and of the embeddings).
        assert all(rank["parameter_bytes"] <= 0.55 * held for rank in ranks)
    else:
        assert all(rank["parameter_bytes"] == held for rank in ranks)
    # Each rank is fed its own rows and gets back their loss, its group's peer another
    # (test_tensor_parallel_training checks them against one process).
    assert len({rank["loss"] for rank in ranks}) == len(ranks)


@pytest.mark.parametrize(
    "scenario",
    [
        "gpt2_tensor_parallel_pipeline",
        "llama_tensor_parallel_pipeline",
        "llama_tensor_parallel_pipeline_ddp",
    ],
)
def test_each_pipeline_stage_is_split_over_its_tensor_parallel_ranks(
    runs: Path, scenario: str
) -> None:
    family = SCENARIOS[scenario][0]
    ranks = _ranks(runs, scenario)
    # cluster placement: a replica's stages on adjacent ranks, its tensor-parallel peers
    # (the same stage) two ranks on, the next replica four ranks on.
    assert [(rank["pp_rank"], rank["tp_rank"], rank["rdp_rank"]) for rank in ranks] == [
        (index % 2, index // 2 % 2, index // 4) for index in range(len(ranks))
    ]
    # SageMaker's model-parallel group is a replica's ranks: stages x tensor-parallel.
    assert all(rank["mp_size"] == 4 for rank in ranks)
    assert [rank["mp_rank"] for rank in ranks] == [
        rank["pp_rank"] * 2 + rank["tp_rank"] for rank in ranks
    ]
    whole = sum(p.numel() * p.element_size() for p in model(family).parameters())
    # Each rank: two of the four blocks, split in two, and an embedding or the head.
    assert all(rank["parameter_bytes"] <= 0.35 * whole for rank in ranks)
    assert all(rank["parameter_bytes"] > 0.2 * whole for rank in ranks)


def test_a_rank_hears_the_first_of_its_own_stages_tensor_parallel_group(runs: Path) -> None:
    ranks = _ranks(runs, "gpt2_tensor_parallel_pipeline")
    # Rank 2 is stage 0's second tensor-parallel rank, rank 3 stage 1's.
    assert [rank["heard"] for rank in ranks] == [{}, {}, {"tp": 0}, {"tp": 1}]
