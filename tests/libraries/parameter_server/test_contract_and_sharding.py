"""The env contract the launcher sets, and the sharding plan every worker computes."""

from __future__ import annotations

import pytest

from libraries.parameter_server import ParameterServerError, plan_shards
from libraries.parameter_server.contract import read_contract
from libraries.parameter_server.sharding import names_by_server
from tests.libraries.parameter_server.cluster import contract_env


def _env(role: str, rank: int, **changes: str) -> dict[str, str]:
    env = contract_env(role=role, rank=rank, num_servers=2, world_size=5, port=29500, host="algo-2")
    env.update(changes)
    return {key: value for key, value in env.items() if value}


def test_a_worker_reads_its_index_from_its_rank() -> None:
    contract = read_contract({**_env("worker", 4), "LOCAL_RANK": "1"})
    assert (contract.role, contract.index, contract.num_workers) == ("worker", 2, 3)
    assert contract.local_rank == 1
    assert contract.rpc_name == "ps-worker-2"
    assert contract.init_method == "tcp://127.0.0.1:29500"


def test_a_server_is_one_of_the_first_ranks() -> None:
    contract = read_contract(_env("server", 1))
    assert (contract.role, contract.index, contract.rpc_name) == ("server", 1, "ps-server-1")


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"RUNYARD_PS_ROLE": "chief"}, "RUNYARD_PS_ROLE"),
        ({"RUNYARD_PS_RANK": ""}, "RUNYARD_PS_RANK"),
        ({"RUNYARD_PS_RANK": "1"}, "RUNYARD_PS_RANK=1 does not fit RUNYARD_PS_ROLE=worker"),
        ({"RUNYARD_PS_RANK": "5"}, "RUNYARD_PS_RANK=5 is not below RUNYARD_PS_WORLD_SIZE=5"),
        ({"RUNYARD_PS_WORLD_SIZE": "2"}, "RUNYARD_PS_WORLD_SIZE must be at least 3"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT must be an integer"),
        ({"MASTER_ADDR": ""}, "MASTER_ADDR is not set"),
    ],
)
def test_a_broken_contract_is_refused_naming_the_variable(
    changes: dict[str, str], named: str
) -> None:
    with pytest.raises(ParameterServerError, match=named):
        read_contract(_env("worker", 3, **changes))


def test_the_plan_balances_sizes_largest_first() -> None:
    sizes = {"a": 100, "b": 60, "c": 50, "d": 10, "e": 1}
    owners = plan_shards(sizes, 2)
    # a -> 0 (100); b -> 1 (60); c -> 1 (110); d -> 0 (110); e -> 0 (ties go low)
    assert owners == {"a": 0, "b": 1, "c": 1, "d": 0, "e": 0}
    assert names_by_server(owners, 2) == [["a", "d", "e"], ["b", "c"]]


def test_the_plan_depends_on_names_and_sizes_only() -> None:
    sizes = {f"layer{i}.weight": (i * 37) % 11 + 1 for i in range(20)}
    shuffled = dict(sorted(sizes.items(), reverse=True))
    assert plan_shards(sizes, 3) == plan_shards(shuffled, 3)


def test_more_servers_than_parameters_leaves_some_shards_empty() -> None:
    assert names_by_server(plan_shards({"w": 4}, 3), 3) == [["w"], [], []]
