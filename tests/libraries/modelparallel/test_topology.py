"""Where ranks stand under each placement, and which ranks shard together."""

from __future__ import annotations

import pytest
import torch

from libraries.modelparallel.step import StepOutput, _split
from libraries.modelparallel.topology import Topology


def test_cluster_puts_a_replicas_stages_on_adjacent_ranks() -> None:
    topology = Topology(8, pp_size=2, placement="cluster")
    assert topology.pp_group(0) == [0, 1]
    assert topology.dp_group(1) == [1, 3, 5, 7]
    assert [topology.pp_rank(r) for r in range(8)] == [0, 1] * 4
    assert all(topology.rank_of(topology.pp_rank(r), topology.dp_rank(r)) == r for r in range(8))


def test_spread_puts_the_replicas_of_a_stage_on_adjacent_ranks() -> None:
    topology = Topology(8, pp_size=2, placement="spread")
    assert topology.dp_group(0) == [0, 1, 2, 3]
    assert topology.pp_group(1) == [1, 5]
    assert all(topology.rank_of(topology.pp_rank(r), topology.dp_rank(r)) == r for r in range(8))


def test_shard_groups_are_adjacent_ranks_replicated_across() -> None:
    topology = Topology(8, shard_degree=4)
    assert topology.shard_mesh() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert topology.replicate_size == 2


def test_sharded_with_tensor_parallelism_cuts_shard_groups_from_the_same_shard_holders() -> None:
    topology = Topology(8, shard_degree=2, tp_size=2)
    # (replicate, shard, tp): tensor-parallel peers adjacent, a shard group one rank of
    # each of two tensor-parallel groups, two such copies of the model states.
    assert topology.sharded_tp_mesh() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert topology.replicate_size == 2
    with pytest.raises(ValueError, match="shard groups of 4 do not divide 2"):
        Topology(4, shard_degree=4, tp_size=2)


def test_degrees_that_do_not_divide_are_refused() -> None:
    with pytest.raises(ValueError, match="do not divide"):
        Topology(6, pp_size=4)
    with pytest.raises(ValueError, match="do not divide"):
        Topology(6, shard_degree=4)


def test_tensors_split_into_microbatches_and_the_rest_stays_whole() -> None:
    x = torch.arange(8).view(4, 2)
    parts = _split({"ids": x, "scale": 2.0}, 2, 0, "batch")
    assert torch.equal(parts[1]["ids"], x[2:])
    assert parts[0]["scale"] == 2.0
    columns = _split(torch.arange(6).view(2, 3), 3, 1, "wide")
    assert [c.shape for c in columns] == [torch.Size([2, 1])] * 3
    with pytest.raises(ValueError, match="'x' has 3 rows"):
        _split(torch.zeros(3, 1), 2, 0, "x")


def test_step_outputs_reduce_across_microbatches() -> None:
    output = StepOutput([torch.tensor(1.0), torch.tensor(3.0)])
    assert output.reduce_mean().item() == 2.0
    assert output.reduce_sum().item() == 4.0
    assert output.stack().tolist() == [1.0, 3.0]
    assert StepOutput([torch.ones(2, 1), torch.zeros(1, 1)]).concat().shape == (3, 1)


def test_tensor_parallel_groups_are_adjacent_ranks_and_replicas_hold_the_same_shard() -> None:
    topology = Topology(world_size=8, tp_size=2)
    assert topology.dp_size == 8  # SageMaker's data-parallel group spans the tp ranks
    assert topology.rdp_size == 4
    assert [topology.tp_rank(rank) for rank in range(8)] == [0, 1] * 4
    assert [topology.rdp_rank(rank) for rank in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert topology.tp_group(1, 0) == [2, 3]
    assert topology.rdp_group(1, 0) == [1, 3, 5, 7]
    assert topology.mp_group(1) == [2, 3]


@pytest.mark.parametrize("placement", ["cluster", "spread"])
def test_tensor_parallel_groups_inside_pipeline_stages_hold_one_stage_each(
    placement: str,
) -> None:
    topology = Topology(world_size=16, pp_size=2, tp_size=2, placement=placement)
    ranks = range(16)
    for rank in ranks:
        stage, rdp, tp = topology.pp_rank(rank), topology.rdp_rank(rank), topology.tp_rank(rank)
        # A rank's groups, as the library and smp.broadcast/send address them, hold it,
        # and hold only ranks of its own stage (tp, rdp) or its own replica (mp).
        own_tp = topology.tp_group(rdp, stage)
        own_rdp = topology.rdp_group(tp, stage)
        assert rank in own_tp
        assert rank in own_rdp
        assert rank in topology.mp_group(rdp)
        assert {topology.pp_rank(peer) for peer in own_tp + own_rdp} == {stage}
        assert {topology.rdp_rank(peer) for peer in topology.mp_group(rdp)} == {rdp}
        assert topology.mp_group(rdp)[topology.mp_rank(rank)] == rank
    # Every rank in exactly one group of each kind.
    for kind in (
        [topology.tp_group(r, p) for p in range(2) for r in range(4)],
        [topology.rdp_group(t, p) for p in range(2) for t in range(2)],
        [topology.mp_group(r) for r in range(4)],
    ):
        assert sorted(rank for group in kind for rank in group) == list(ranks)


def test_tensor_parallel_degrees_that_do_not_divide_are_refused() -> None:
    with pytest.raises(ValueError, match="do not divide"):
        Topology(world_size=4, tp_size=3)
