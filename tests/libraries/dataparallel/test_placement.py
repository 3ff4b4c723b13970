"""The launcher contract: how a process learns its rank, its rendezvous and its instance,
and how the instance layout follows from every process's RUNYARD_HOST."""

from __future__ import annotations

import socket

import pytest

from libraries.dataparallel.placement import Placement, PlacementError, from_environment
from libraries.dataparallel.topology import Topology

RENDEZVOUS = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


def test_reads_torch_style_variables() -> None:
    env = {**RENDEZVOUS, "RANK": "3", "WORLD_SIZE": "4", "RUNYARD_HOST": "algo-2"}
    assert from_environment(env) == Placement(3, 4, "10.0.0.1", 29500, "algo-2")


def test_reads_open_mpi_variables() -> None:
    env = {
        **RENDEZVOUS,
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "RUNYARD_HOST": "algo-2",
    }
    assert from_environment(env) == Placement(1, 2, "10.0.0.1", 29500, "algo-2")


def test_host_falls_back_to_the_machine_name() -> None:
    env = {**RENDEZVOUS, "RANK": "0", "WORLD_SIZE": "1"}
    assert from_environment(env).host == socket.gethostname()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({**RENDEZVOUS}, "RANK and WORLD_SIZE"),
        ({**RENDEZVOUS, "RANK": "0"}, "WORLD_SIZE"),
        ({**RENDEZVOUS, "RANK": "2", "WORLD_SIZE": "2"}, "RANK=2"),
        ({"MASTER_PORT": "1", "RANK": "0", "WORLD_SIZE": "1"}, "MASTER_ADDR"),
        ({**RENDEZVOUS, "MASTER_PORT": "x", "RANK": "0", "WORLD_SIZE": "1"}, "MASTER_PORT"),
        ({**RENDEZVOUS, "OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE"),
    ],
)
def test_refuses_an_environment_that_does_not_place_the_process(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(PlacementError, match=named):
        from_environment(env)


def test_instances_are_gathered_not_assumed_contiguous() -> None:
    hosts = ["algo-1", "algo-2", "algo-1", "algo-2"]
    topology = Topology.from_hosts(hosts, rank=2)
    assert topology.instances == ((0, 2), (1, 3))
    assert topology.instance_hosts == ("algo-1", "algo-2")
    assert (topology.instance_index, topology.local_rank, topology.local_size) == (0, 1, 2)
    assert topology.processes_per_instance == 2


def test_uneven_instances_are_refused_by_name() -> None:
    topology = Topology.from_hosts(["algo-1", "algo-1", "algo-2"], rank=0)
    with pytest.raises(ValueError, match="algo-1: 2, algo-2: 1"):
        _ = topology.processes_per_instance
