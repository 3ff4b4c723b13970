"""Training through real server and worker processes: two emulated instances, each with
one server and one worker, started with the launcher's env contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from libraries.parameter_server import plan_shards
from tests.libraries.parameter_server import scenario
from tests.libraries.parameter_server.cluster import Finished, describe, run_cluster

SCENARIO = str(Path(scenario.__file__).relative_to(Path(__file__).resolve().parents[3]))
LR = 0.02


def _run(output: Path, *options: str) -> list[Finished]:
    return run_cluster(output / "logs", [SCENARIO, "--output", str(output), *options])


def _record(output: Path, worker: int) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((output / f"worker-{worker}.json").read_text())
    return loaded


def _parameters(path: Path) -> dict[str, torch.Tensor]:
    loaded: dict[str, torch.Tensor] = torch.load(path, weights_only=True)
    return loaded


Run = tuple[Path, list[Finished]]

# Sync: worker 1 stops after SHARED steps; worker 0 goes on alone for EXTRA more.
SHARED, EXTRA = 6, 3
# Async: worker 0 runs FAST_STEPS, worker 1 SLOW_STEPS; worker 1 stops pushing after 3
# steps until the staleness bound holds worker 0 back, so the bound is sure to be reached.
BOUND, FAST_STEPS, SLOW_STEPS = 2, 40, 15


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    output = tmp_path_factory.mktemp("sync")
    finished = _run(
        output,
        *("--mode", "sync", "--lr", str(LR)),
        *("--steps", str(SHARED + EXTRA), "--steps-for", f"1={SHARED}"),
    )
    return output, finished


@pytest.fixture(scope="module")
def async_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    output = tmp_path_factory.mktemp("async")
    finished = _run(
        output,
        *("--mode", "async", "--max-staleness", str(BOUND), "--lr", str(LR)),
        *("--steps", str(FAST_STEPS), "--steps-for", f"1={SLOW_STEPS}"),
        *("--pause-worker", "1", "--pause-after", "3"),
    )
    return output, finished


def _sync_reference() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Single-process training on the concatenated batch: (after SHARED steps, at the end)."""
    model = scenario.make_model(seed=0)
    optimizer = scenario.sgd(LR)(model.parameters())
    after_shared: dict[str, torch.Tensor] = {}
    for step in range(SHARED + EXTRA):
        workers = [0, 1] if step < SHARED else [0]
        batches = [scenario.batch(worker, step) for worker in workers]
        inputs = torch.cat([inputs for inputs, _ in batches])
        targets = torch.cat([targets for _, targets in batches])
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
        if step == SHARED - 1:
            after_shared = {k: v.clone() for k, v in model.state_dict().items()}
    return after_shared, model.state_dict()


def test_sync_mode_equals_single_process_training_on_the_concatenated_batch(
    sync_run: Run,
) -> None:
    output, finished = sync_run
    assert [p.exit_code for p in finished] == [0, 0, 0, 0], describe(finished)
    after_shared, final = _sync_reference()
    # Worker 1 (seeded differently) started from worker 0's values.
    initial = {k: torch.tensor(v) for k, v in _record(output, 1)["initial"].items()}
    torch.testing.assert_close(initial, scenario.make_model(seed=0).state_dict())
    # While both trained, each step averaged both gradients...
    torch.testing.assert_close(_parameters(output / "worker-1.pt"), after_shared)
    # ...and once worker 1 had finished, worker 0's steps went on alone.
    torch.testing.assert_close(_parameters(output / "worker-0.pt"), final)
    torch.testing.assert_close(_parameters(output / "pulled.pt"), final)


def test_each_server_holds_only_its_shard(sync_run: Run) -> None:
    output, finished = sync_run
    assert [p.exit_code for p in finished] == [0, 0, 0, 0], describe(finished)
    sizes = {n: p.numel() for n, p in scenario.make_model(seed=0).named_parameters()}
    # Largest first, each to the lighter server: 0.weight (128) alone on server 0.
    expected = {"0.weight": 0, "0.bias": 1, "2.weight": 1, "2.bias": 1}
    assert plan_shards(sizes, 2) == expected
    record = _record(output, 0)
    assert record["owners"] == expected
    held = [set(stats["names"]) for stats in record["stats"]]
    assert held == [{"0.weight"}, {"0.bias", "2.weight", "2.bias"}]
    assert [stats["numel"] for stats in record["stats"]] == [128, 33]


def test_async_workers_finishing_at_different_times_shut_down_cleanly(async_run: Run) -> None:
    output, finished = async_run
    assert [p.exit_code for p in finished] == [0, 0, 0, 0], describe(finished)
    pushes = [len(_record(output, worker)["pushes"]) for worker in (0, 1)]
    assert pushes == [FAST_STEPS, SLOW_STEPS]


def test_async_training_converges(async_run: Run) -> None:
    output, finished = async_run
    assert [p.exit_code for p in finished] == [0, 0, 0, 0], describe(finished)
    record = _record(output, 0)
    assert record["initial_loss"] > 1.0
    assert record["final_loss"] < 0.2


def test_no_worker_ran_more_than_max_staleness_steps_ahead(async_run: Run) -> None:
    output, finished = async_run
    assert [p.exit_code for p in finished] == [0, 0, 0, 0], describe(finished)
    records = [_record(output, worker) for worker in (0, 1)]
    # The servers' own account: the largest lead any worker was let go with, per server.
    leads = [max(r["stats"][server]["max_lead"] for r in records) for server in (0, 1)]
    assert leads == [BOUND, BOUND]
    # And the workers' account, from their push logs alone: when a worker got its k-th
    # push answered, the other had sent at least k - BOUND pushes, or had finished.
    for me, other in ((0, 1), (1, 0)):
        other_sent = [sent for sent, _ in records[other]["pushes"]]
        for k, (_, answered) in enumerate(records[me]["pushes"], start=1):
            if records[other]["finish_sent"] < answered:
                break
            assert sum(sent < answered for sent in other_sent) >= k - BOUND, (me, k)
