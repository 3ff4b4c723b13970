"""The correctness jobs run once per layout and session; several test modules read them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.libraries.dataparallel.launch import EnvStyle, Layout, run_job


@dataclass(frozen=True)
class TrainingJob:
    layout: Layout
    ranks: list[dict[str, Any]]  # what each rank wrote, by rank

    @property
    def world_size(self) -> int:
        return len(self.layout.hosts)


# 2 instances x 1 process, launched torchrun-style; 2 instances x 2 processes, launched
# as mpirun does, with ranks interleaved across instances.
JOBS: dict[str, tuple[Layout, EnvStyle]] = {
    "2x1": (Layout.blocks(instances=2, per_instance=1), "torch"),
    "2x2": (Layout.interleaved(instances=2, per_instance=2), "open_mpi"),
}


@pytest.fixture(scope="session", params=sorted(JOBS))
def training_job(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> TrainingJob:
    layout, style = JOBS[request.param]
    out: Path = tmp_path_factory.mktemp(f"dataparallel-{request.param}")
    run_job(["-m", "tests.libraries.dataparallel.training_worker", str(out)], layout, style=style)
    ranks = [
        json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(len(layout.hosts))
    ]
    return TrainingJob(layout, ranks)
