"""After N steps, Runyard data parallel holds the parameters that torch's DDP and
single-process training on the whole batch reach (2 and 4 processes on 2 instances)."""

from __future__ import annotations

import pytest
import torch

from tests.libraries.dataparallel.conftest import TrainingJob
from tests.libraries.dataparallel.workload import single_process_reference

# float32 with a different summation order: a few ulps of the parameters.
EXACT = {"atol": 1e-6, "rtol": 1e-5}
# What crosses instances is rounded once per step; bf16 keeps 8 bits of mantissa.
COMPRESSED = {
    "runyard_fp16": {"atol": 1e-3, "rtol": 0.0},
    "runyard_bf16": {"atol": 5e-3, "rtol": 0.0},
}


def params(job: TrainingJob, scenario: str) -> torch.Tensor:
    return torch.tensor(job.ranks[0]["params"][scenario])


@pytest.mark.parametrize("scenario", ["runyard", "runyard_owner", "runyard_scatter"])
def test_matches_single_process_training(training_job: TrainingJob, scenario: str) -> None:
    reference = single_process_reference(training_job.world_size)
    torch.testing.assert_close(params(training_job, scenario), reference, **EXACT)


@pytest.mark.parametrize("scenario", ["runyard", "runyard_owner", "runyard_scatter"])
def test_matches_torch_ddp(training_job: TrainingJob, scenario: str) -> None:
    torch.testing.assert_close(
        params(training_job, scenario), params(training_job, "torch_ddp"), **EXACT
    )


def test_torch_ddp_itself_matches_single_process(training_job: TrainingJob) -> None:
    # The yardstick is right: torch's DDP on this workload equals the concatenated batch.
    reference = single_process_reference(training_job.world_size)
    torch.testing.assert_close(params(training_job, "torch_ddp"), reference, **EXACT)


@pytest.mark.parametrize("scenario", sorted(COMPRESSED))
def test_compressed_training_stays_close(training_job: TrainingJob, scenario: str) -> None:
    reference = single_process_reference(training_job.world_size)
    compressed = params(training_job, scenario)
    torch.testing.assert_close(compressed, reference, **COMPRESSED[scenario])
    # ... and compression really happened: rounding moved some parameter.
    assert not torch.equal(compressed, params(training_job, "runyard"))


def test_every_replica_holds_the_same_parameters(training_job: TrainingJob) -> None:
    for rank in training_job.ranks:
        assert rank["divergence"] == dict.fromkeys(rank["divergence"], 0.0)


def test_reduction_averages_buffers_of_any_size(training_job: TrainingJob) -> None:
    # Sizes smaller than the process count, and sizes that need padding.
    for rank in training_job.ranks:
        assert max(rank["direct_errors"].values()) <= 1e-6, rank["direct_errors"]


def test_plain_collectives_work_on_the_same_group(training_job: TrainingJob) -> None:
    world = training_job.world_size
    assert [rank["plain_all_reduce"] for rank in training_job.ranks] == [
        float(sum(range(world)))
    ] * world


def test_reduction_threads_end_with_their_models(training_job: TrainingJob) -> None:
    assert [rank["reduction_threads_left"] for rank in training_job.ranks] == [0] * len(
        training_job.ranks
    )
