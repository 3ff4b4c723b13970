"""Where a process stands in the job, read from the launcher's environment.

Two launchers start data-parallel processes: torchrun-style instances (RANK, WORLD_SIZE,
...) and mpirun (OMPI_COMM_WORLD_*). Both forward MASTER_ADDR and MASTER_PORT. Which
instance a process runs on is RUNYARD_HOST: on the local backend several instances share
one machine, so the machine's host name cannot tell them apart.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass

from contract import variables

TORCH_RANK_VARIABLES = ("RANK", "WORLD_SIZE")
OPEN_MPI_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
RENDEZVOUS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT")


class PlacementError(RuntimeError):
    """The environment does not say where this process belongs."""


@dataclass(frozen=True)
class Placement:
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    host: str


def names_a_rank(env: Mapping[str, str]) -> bool:
    """Whether a launcher started this process as one rank of a job."""
    return TORCH_RANK_VARIABLES[0] in env or OPEN_MPI_RANK_VARIABLES[0] in env


def from_environment(env: Mapping[str, str]) -> Placement:
    """torch-style variables win when both sets are present: mpirun's rank wrapper sets
    RANK from OMPI_COMM_WORLD_RANK, so they agree whenever both exist."""
    if TORCH_RANK_VARIABLES[0] in env:
        rank_name, size_name = TORCH_RANK_VARIABLES
    elif OPEN_MPI_RANK_VARIABLES[0] in env:
        rank_name, size_name = OPEN_MPI_RANK_VARIABLES
    else:
        raise PlacementError(
            "no rank in the environment: set RANK and WORLD_SIZE (torchrun style) or start "
            "the processes with mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)"
        )
    rank = _integer(env, rank_name)
    world_size = _integer(env, size_name)
    if world_size < 1 or not 0 <= rank < world_size:
        raise PlacementError(f"{rank_name}={rank} does not fit {size_name}={world_size}")
    master_port = _integer(env, RENDEZVOUS_VARIABLES[1])
    if not 0 < master_port < 65536:
        raise PlacementError(f"MASTER_PORT={master_port} is not a TCP port")
    return Placement(
        rank=rank,
        world_size=world_size,
        master_addr=_required(env, RENDEZVOUS_VARIABLES[0]),
        master_port=master_port,
        host=current_host(env),
    )


def current_host(env: Mapping[str, str]) -> str:
    return env.get(variables.HOST) or socket.gethostname()


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise PlacementError(f"{name} is not set")
    return value


def _integer(env: Mapping[str, str], name: str) -> int:
    value = _required(env, name)
    try:
        return int(value)
    except ValueError:
        raise PlacementError(f"{name}={value!r} is not an integer") from None
