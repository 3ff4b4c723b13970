"""The environment contract between the launcher and every parameter-server process.

The launcher sets these variables; nothing else is read. Ranks are the RPC ranks: servers
first (one per instance, in instance order), then workers (instance order, then local rank).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from contract import variables
from libraries.parameter_server.errors import ParameterServerError

Role = Literal["server", "worker"]

ROLE = variables.PS_ROLE
NUM_SERVERS = variables.PS_NUM_SERVERS
RANK = variables.PS_RANK
WORLD_SIZE = variables.PS_WORLD_SIZE
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
HOST = variables.HOST
LOCAL_RANK = "LOCAL_RANK"


def server_name(server_index: int) -> str:
    # Sorts before every worker name, so torch's shutdown barrier is led by a server.
    return f"ps-server-{server_index}"


def worker_name(worker_index: int) -> str:
    return f"ps-worker-{worker_index}"


@dataclass(frozen=True)
class ClusterContract:
    role: Role
    num_servers: int
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    host: str
    local_rank: int

    @property
    def num_workers(self) -> int:
        return self.world_size - self.num_servers

    @property
    def index(self) -> int:
        """The server index for a server, the worker index (0..W-1) for a worker."""
        return self.rank if self.role == "server" else self.rank - self.num_servers

    @property
    def rpc_name(self) -> str:
        return server_name(self.index) if self.role == "server" else worker_name(self.index)

    @property
    def init_method(self) -> str:
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"


def read_contract(environ: Mapping[str, str] | None = None) -> ClusterContract:
    """Parse and check the contract; the error names the variable that is wrong."""
    env = os.environ if environ is None else environ
    role = _required(env, ROLE)
    if role not in ("server", "worker"):
        raise ParameterServerError(f"{ROLE} must be 'server' or 'worker', not {role!r}")
    num_servers = _integer(env, NUM_SERVERS, minimum=1)
    world_size = _integer(env, WORLD_SIZE, minimum=num_servers + 1)
    rank = _integer(env, RANK, minimum=0)
    if rank >= world_size:
        raise ParameterServerError(f"{RANK}={rank} is not below {WORLD_SIZE}={world_size}")
    if (rank < num_servers) != (role == "server"):
        raise ParameterServerError(
            f"{RANK}={rank} does not fit {ROLE}={role}: servers hold ranks "
            f"0..{num_servers - 1}, workers {num_servers}..{world_size - 1}"
        )
    return ClusterContract(
        role="server" if role == "server" else "worker",
        num_servers=num_servers,
        rank=rank,
        world_size=world_size,
        master_addr=_required(env, MASTER_ADDR),
        master_port=_integer(env, MASTER_PORT, minimum=1),
        host=env.get(HOST, ""),
        local_rank=_integer(env, LOCAL_RANK, minimum=0) if env.get(LOCAL_RANK) else 0,
    )


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ParameterServerError(f"{name} is not set; the parameter-server launcher sets it")
    return value


def _integer(env: Mapping[str, str], name: str, *, minimum: int) -> int:
    text = _required(env, name)
    try:
        value = int(text)
    except ValueError:
        raise ParameterServerError(f"{name} must be an integer, not {text!r}") from None
    if value < minimum:
        raise ParameterServerError(f"{name} must be at least {minimum}, not {value}")
    return value
