"""Which collectives the reduction runs: on CPU by default one allreduce over the job; the
hierarchical, instance-sharded exchanges when asked for (the default on CUDA): the
collectives each process ran, on which groups, and which shard each instance reduced."""

from __future__ import annotations

from typing import Any

import pytest

from tests.libraries.dataparallel.conftest import TrainingJob


def buckets(records: list[dict[str, Any]], per_instance: int) -> list[list[dict[str, Any]]]:
    size = 4 if per_instance > 1 else 2
    return [records[i : i + size] for i in range(0, len(records), size)]


def split_sizes(numel: int, parts: int) -> list[int]:
    """As torch.tensor_split divides: the first numel % parts parts one larger."""
    return [numel // parts + (1 if part < numel % parts else 0) for part in range(parts)]


def instance_ranks(job: TrainingJob, host: str) -> list[int]:
    return [rank for rank, rank_host in enumerate(job.layout.hosts) if rank_host == host]


def test_groups_follow_runyard_host_not_rank_order(training_job: TrainingJob) -> None:
    hosts = training_job.layout.hosts
    for rank, seen in enumerate(training_job.ranks):
        mine = instance_ranks(training_job, hosts[rank])
        assert seen["instance_ranks"] == mine
        assert seen["local_rank"] == mine.index(rank)
        assert seen["local_size"] == len(mine)
        # One process per instance in the cross group, the one in this process's position.
        cross = seen["cross_ranks"]
        assert sorted(hosts[member] for member in cross) == sorted(set(hosts))
        assert all(
            instance_ranks(training_job, hosts[member]).index(member) == seen["local_rank"]
            for member in cross
        )


def test_gradients_are_views_of_the_fusion_buffers(training_job: TrainingJob) -> None:
    # Nothing copied into the buffers before a reduction nor out after it; the training
    # tests show the parameters still follow one-process training.
    assert {rank["gradient_as_bucket_view"] for rank in training_job.ranks} == {True}


def test_gloo_defaults_to_one_allreduce_per_bucket(training_job: TrainingJob) -> None:
    assert {rank["shard_exchange"] for rank in training_job.ranks} == {"allreduce"}
    for seen in training_job.ranks:
        records = seen["records"]["runyard"]
        assert len(records) > 6, "expected several buffers per step"
        assert {record["stage"] for record in records} == {"world_allreduce"}
        assert {tuple(record["group_ranks"]) for record in records} == {
            tuple(range(training_job.world_size))
        }


@pytest.mark.parametrize(
    ("scenario", "reduce_stage", "share_stage"),
    [
        ("runyard_owner", "reduce", "broadcast"),
        ("runyard_scatter", "reduce_scatter", "all_gather"),
    ],
)
def test_each_bucket_runs_the_hierarchical_stages(
    training_job: TrainingJob, scenario: str, reduce_stage: str, share_stage: str
) -> None:
    hosts = training_job.layout.hosts
    instances = len(set(hosts))
    for seen in training_job.ranks:
        per_instance = seen["local_size"]
        records = seen["records"][scenario]
        fusion_buffers = buckets(records, per_instance)
        # Small bucket_cap_mb: every step fills several fusion buffers.
        assert len(fusion_buffers) > 6, "expected several buffers per step"
        for stages in fusion_buffers:
            expected = [f"cross_{reduce_stage}", f"cross_{share_stage}"]
            if per_instance > 1:
                expected = [f"instance_{reduce_stage}", *expected, f"instance_{share_stage}"]
            assert [stage["stage"] for stage in stages] == expected
            for stage in stages:
                group = (
                    seen["cross_ranks"]
                    if stage["stage"].startswith("cross")
                    else seen["instance_ranks"]
                )
                assert stage["group_ranks"] == group
            buffer = stages[0]["input_numel"]
            if reduce_stage == "reduce_scatter":
                assert buffer % (instances * per_instance) == 0  # padded to equal shards
            cross_reduce, cross_share = stages[-3:-1] if per_instance > 1 else stages
            # What crosses instances is this process's slab, 1/L of the buffer, and it
            # reduces 1/I of that: its instance's shard.
            slab = split_sizes(buffer, per_instance)[seen["local_rank"]]
            assert cross_reduce["input_numel"] == cross_share["output_numel"] == slab
            assert (
                cross_reduce["output_numel"]
                == split_sizes(slab, instances)[cross_reduce["owned_shard"]]
            )


@pytest.mark.parametrize("scenario", ["runyard_owner", "runyard_scatter"])
def test_each_instance_reduces_its_own_shard(training_job: TrainingJob, scenario: str) -> None:
    hosts = training_job.layout.hosts
    shard_of_host: dict[str, set[int]] = {}
    for rank, seen in enumerate(training_job.ranks):
        for record in seen["records"][scenario]:
            if record["stage"].startswith("cross"):
                shard_of_host.setdefault(hosts[rank], set()).add(record["owned_shard"])
    # Every process of an instance reduces the same shard, in every buffer; with the
    # instances numbered by their lowest rank, instance i reduces shard i.
    assert {host: sorted(shards) for host, shards in shard_of_host.items()} == {
        host: [index] for index, host in enumerate(sorted(set(hosts)))
    }
