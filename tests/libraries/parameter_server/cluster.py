"""Emulate a parameter-server job's instances on this machine, as real processes.

Each instance gets one server (``python -m libraries.parameter_server``) and its workers,
with exactly the environment the launcher sets (see ``libraries.parameter_server``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# Far above what any scenario needs; only reached when something hangs.
HANG_LIMIT_S = 120.0


@dataclass(frozen=True)
class Finished:
    role: str
    index: int
    host: str
    # None: still running at the hang limit, and killed.
    exit_code: int | None
    output: str


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def contract_env(
    *, role: str, rank: int, num_servers: int, world_size: int, port: int, host: str
) -> dict[str, str]:
    return {
        "RUNYARD_PS_ROLE": role,
        "RUNYARD_PS_NUM_SERVERS": str(num_servers),
        "RUNYARD_PS_RANK": str(rank),
        "RUNYARD_PS_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RUNYARD_HOST": host,
    }


def run_cluster(
    logs: Path,
    worker_argv: Sequence[str],
    *,
    instances: int = 2,
    workers_per_instance: int = 1,
    server_args: Sequence[str] = (),
    worker_env: Callable[[str], dict[str, str]] = lambda host: {},
    skip_workers: Sequence[int] = (),
) -> list[Finished]:
    """Start every process, wait for all to exit, and return them servers first.

    ``worker_argv`` follows the python executable; ``skip_workers`` are never started,
    as if their instance had failed before launching them.
    """
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    num_workers = instances * workers_per_instance
    world_size = instances + num_workers
    # The processes see the contract and nothing else of Runyard's; one torch thread each,
    # as four of them share two cores here.
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    base = {**inherited, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    started: list[tuple[str, int, str, subprocess.Popen[bytes], Path]] = []
    try:
        for server in range(instances):
            host = f"algo-{server + 1}"
            env = {
                **base,
                **contract_env(
                    role="server",
                    rank=server,
                    num_servers=instances,
                    world_size=world_size,
                    port=port,
                    host=host,
                ),
            }
            argv = [sys.executable, "-m", "libraries.parameter_server", *server_args]
            started.append(("server", server, host, *_start(argv, env, logs / f"server-{server}")))
        for worker in range(num_workers):
            if worker in skip_workers:
                continue
            host = f"algo-{worker // workers_per_instance + 1}"
            env = {
                **base,
                **worker_env(host),
                **contract_env(
                    role="worker",
                    rank=instances + worker,
                    num_servers=instances,
                    world_size=world_size,
                    port=port,
                    host=host,
                ),
                "LOCAL_RANK": str(worker % workers_per_instance),
            }
            argv = [sys.executable, *worker_argv]
            started.append(("worker", worker, host, *_start(argv, env, logs / f"worker-{worker}")))
        deadline = time.monotonic() + HANG_LIMIT_S
        return [
            Finished(role, index, host, _wait(process, deadline), log.read_text(errors="replace"))
            for role, index, host, process, log in started
        ]
    finally:
        for *_, process, _ in started:
            if process.poll() is None:
                process.kill()
                process.wait()


def by_role(finished: list[Finished], role: str) -> list[Finished]:
    return [process for process in finished if process.role == role]


def describe(finished: list[Finished]) -> str:
    """Every process's exit code and output, for assertion messages."""
    return "\n".join(
        f"--- {p.role} {p.index} on {p.host}: exit {p.exit_code}\n{p.output}" for p in finished
    )


def _start(argv: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], Path]:
    path = log.with_suffix(".log")
    with path.open("wb") as sink:
        process = subprocess.Popen(argv, env=env, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    return process, path


def _wait(process: subprocess.Popen[bytes], deadline: float) -> int | None:
    try:
        return process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None
