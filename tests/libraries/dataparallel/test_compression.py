"""fp16/bf16 compression on CPU: every process ends with the same bits, equal to the
float32 average of the half-rounded inputs rounded once (within one unit in the last
place, for the order of the float32 additions), on 2, 3 and 4 processes, for empty, tiny
and odd-sized buffers, through both paths; and training behind DDP's hook with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.libraries.dataparallel.compression_worker import PATHS, SIZES
from tests.libraries.dataparallel.launch import Layout, run_job
from tests.libraries.dataparallel.workload import single_process_reference

LAYOUTS = {
    "2x1": Layout.blocks(instances=2, per_instance=1),
    "3x1": Layout.blocks(instances=3, per_instance=1),
    "2x2": Layout.interleaved(instances=2, per_instance=2),
}
COMPRESSIONS = ("fp16", "bf16")
# Rounded once per step, as in test_training.py.
TRAINED = {"fp16": {"atol": 1e-3, "rtol": 0.0}, "bf16": {"atol": 5e-3, "rtol": 0.0}}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def job(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    layout = LAYOUTS[request.param]
    out: Path = tmp_path_factory.mktemp(f"compression-{request.param}")
    run_job(["-m", "tests.libraries.dataparallel.compression_worker", str(out)], layout)
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(len(layout.hosts))]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_average_is_the_half_rounded_float32_average(
    job: list[dict[str, Any]], compression: str, path: str
) -> None:
    for rank in job:
        for size in SIZES:
            seen = rank["direct"][f"{compression}/{path}/{size}"]
            assert seen["ulps"] <= 1.0, (size, seen)
            assert seen["representable"], size
            # Nearly every element exactly: a unit's difference is a rare tie.
            assert seen["equal"] >= 0.99 * size, (size, seen)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_every_process_holds_the_same_bits(
    job: list[dict[str, Any]], compression: str, path: str
) -> None:
    for rank in job:
        for size in SIZES:
            assert rank["direct"][f"{compression}/{path}/{size}"]["identical"], size


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_each_path_is_the_one_taken(job: list[dict[str, Any]], compression: str) -> None:
    for rank in job:
        assert rank["stages"][f"{compression}/all_gather"] == ["world_compressed_all_gather"]
        assert rank["stages"][f"{compression}/p2p"] == ["world_compressed_p2p"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_training_point_to_point_follows_one_process(
    job: list[dict[str, Any]], compression: str
) -> None:
    reference = single_process_reference(len(job))
    for rank in job:
        trained = rank["trained"][compression]
        assert trained["identical"]
        torch.testing.assert_close(
            torch.tensor(trained["params"]), reference, **TRAINED[compression]
        )
