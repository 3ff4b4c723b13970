"""Tensor parallelism as SageMaker's library does it with its defaults: each rank of a
tensor-parallel group is fed its own samples and gets back its own samples' loss, while
training follows one process on the global batch, step by step (four steps of SGD, four
of Adam), under tp, tp x dp, tp x pp and with ``prescaled_batch``. Each run is real
processes placed as mpirun places them; the families' models are built from their
libraries' default configurations."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.libraries.dataparallel.launch import Layout, run_job
from tests.libraries.modelparallel.tensor_parallel_training import (
    SCENARIOS,
    SGD_STEPS,
    STEPS,
    losses_of_rows,
    reference,
)
from tests.libraries.modelparallel.transformers_workload import FAMILIES

# The fixture runs 4 jobs of 2 to 4 processes (the scenarios of one layout share one).
pytestmark = pytest.mark.timeout(2400)

ONE_INSTANCE = Layout.blocks(instances=1, per_instance=2)
TWO_INSTANCES = Layout.blocks(instances=2, per_instance=2)
LAYOUTS = {
    "gpt2": ONE_INSTANCE,
    "bart": ONE_INSTANCE,
    "mistral": ONE_INSTANCE,
    "qwen2": ONE_INSTANCE,
    "neox": ONE_INSTANCE,
    "bert": ONE_INSTANCE,
    "opt_ddp": TWO_INSTANCES,
    "llama_prescaled_ddp": TWO_INSTANCES,
    "llama_pipeline": Layout.blocks(instances=1, per_instance=4),
}
# An SGD step is linear in the gradient: float32 sums in another order, nothing more.
SGD_CLOSE = {"atol": 1e-6, "rtol": 1e-5}
# Adam steps each element by up to its learning rate whatever its gradient's size, so it
# turns the float noise of gradients that cancel to nearly nothing (an attention key's
# bias: softmax ignores a constant per query; an element of an embedding) into steps
# of up to 1e-3: each tensor is within 1e-4 of the reference by element, or as a whole
# within 2% of how far Adam moved it.
ADAM_CLOSE = {"atol": 1e-4, "rtol": 1e-4}
ADAM_SHARE = 0.02
# A loss is one number computed the same way, summed in another order.
LOSS_CLOSE = {"atol": 2e-6, "rtol": 0.0}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tensor-parallel-training")
    jobs: dict[Layout, list[str]] = {}
    for scenario, layout in LAYOUTS.items():
        jobs.setdefault(layout, []).append(scenario)
    for layout, scenarios in jobs.items():
        run_job(
            ["-m", f"{__package__}.tensor_parallel_training_worker", str(out), *scenarios],
            layout,
            style="open_mpi",
            compat=True,
            timeout=300 * len(scenarios),
        )
    run_job(
        ["-m", f"{__package__}.tensor_parallel_worker", str(out)],
        ONE_INSTANCE,
        timeout=240,
    )
    return out


@functools.cache
def _reference(family: str) -> list[dict[str, torch.Tensor]]:
    return reference(family)


def _ranks(runs: Path, scenario: str) -> list[dict[str, Any]]:
    count = len(LAYOUTS[scenario].hosts)
    return [json.loads((runs / f"{scenario}-rank-{r}.json").read_text()) for r in range(count)]


def _states(runs: Path, scenario: str) -> list[dict[str, torch.Tensor]]:
    states: list[dict[str, torch.Tensor]] = torch.load(runs / f"{scenario}.pt")
    assert len(states) == STEPS
    return states


@pytest.mark.parametrize("scenario", list(LAYOUTS))
def test_parameters_follow_one_process_after_every_step_of_sgd_and_of_adam(
    runs: Path, scenario: str
) -> None:
    expected = _reference(SCENARIOS[scenario][0])
    got = _states(runs, scenario)
    for step in range(SGD_STEPS):
        assert got[step].keys() == expected[step].keys()
        for key, wanted in expected[step].items():
            where = f"step {step}, {key}"
            torch.testing.assert_close(
                got[step][key], wanted, **SGD_CLOSE, msg=lambda m, w=where: f"{w}: {m}"
            )
    before_adam = expected[SGD_STEPS - 1]
    for step in range(SGD_STEPS, STEPS):
        assert got[step].keys() == expected[step].keys()
        for key, wanted in expected[step].items():
            if torch.allclose(got[step][key], wanted, **ADAM_CLOSE):
                continue
            moved = (wanted - before_adam[key]).norm()
            off = (got[step][key] - wanted).norm()
            assert off <= ADAM_SHARE * moved, f"step {step}, {key}: {off} off, Adam moved {moved}"


@pytest.mark.parametrize("scenario", list(LAYOUTS))
def test_each_rank_gets_back_the_loss_of_the_samples_it_was_fed(runs: Path, scenario: str) -> None:
    family, config = SCENARIOS[scenario]
    states = _states(runs, scenario)
    ranks = _ranks(runs, scenario)
    fed = {tuple(rank["rows"]) for rank in ranks}
    if config.get("prescaled_batch"):
        # A group's ranks share one batch; the groups' batches make the global one.
        assert len(fed) == len(ranks) // 2
    else:
        # Each rank its own (a replica's stages, the same).
        assert len(fed) == len(ranks) // int(config.get("partitions", 1))  # type: ignore[call-overload]
    for rank in ranks:
        # What one process computes on those rows, with the parameters the run had.
        wanted = losses_of_rows(family, states, slice(*rank["rows"]))
        torch.testing.assert_close(rank["losses"], wanted, **LOSS_CLOSE)


@pytest.mark.parametrize("family", FAMILIES)
def test_split_blocks_compute_on_the_groups_rows_and_give_each_rank_its_own(
    runs: Path, family: str
) -> None:
    for rank in range(2):
        found = json.loads((runs / f"tensor-parallel-rank-{rank}.json").read_text())[family]
        assert found["blocks"] == 4
        assert found["split_weights"] > 0
        assert found["logits"] < 1e-5
        assert found["loss"] < 1e-6
        assert found["gradients"] < 1e-5
        assert found["state_dict"] == 0.0
