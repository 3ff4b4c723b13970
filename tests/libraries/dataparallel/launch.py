"""Start a job's processes as the launchers do: one OS process per rank, placed by the
environment contract (torch-style or Open MPI variables, RUNYARD_HOST per instance)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parents[3]
COMPAT_DIR = REPO / "libraries" / "compat"
EnvStyle = Literal["torch", "open_mpi"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Layout:
    """``hosts[rank]`` is the instance rank ``rank`` runs on."""

    hosts: tuple[str, ...]

    @classmethod
    def blocks(cls, instances: int, per_instance: int) -> Layout:
        return cls(tuple(f"algo-{r // per_instance + 1}" for r in range(instances * per_instance)))

    @classmethod
    def interleaved(cls, instances: int, per_instance: int) -> Layout:
        """Rank r on instance r % instances: ranks are not contiguous per instance."""
        return cls(tuple(f"algo-{r % instances + 1}" for r in range(instances * per_instance)))

    def local_rank(self, rank: int) -> int:
        return self.hosts[:rank].count(self.hosts[rank])


def rank_environment(
    layout: Layout, rank: int, port: int, style: EnvStyle, *, compat: bool
) -> dict[str, str]:
    host = layout.hosts[rank]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RUNYARD_", "OMPI_", "PYTHONPATH"))
        and key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    }
    place = {
        "rank": str(rank),
        "size": str(len(layout.hosts)),
        "local_rank": str(layout.local_rank(rank)),
        "local_size": str(layout.hosts.count(host)),
    }
    if style == "torch":
        env.update(
            RANK=place["rank"],
            WORLD_SIZE=place["size"],
            LOCAL_RANK=place["local_rank"],
            LOCAL_WORLD_SIZE=place["local_size"],
        )
    else:
        env.update(
            OMPI_COMM_WORLD_RANK=place["rank"],
            OMPI_COMM_WORLD_SIZE=place["size"],
            OMPI_COMM_WORLD_LOCAL_RANK=place["local_rank"],
            OMPI_COMM_WORLD_LOCAL_SIZE=place["local_size"],
        )
    # As the launcher does for job processes: `runtime` from the repository, and
    # `smdistributed` only when the compatibility directory is on the path.
    path = [str(COMPAT_DIR), str(REPO)] if compat else [str(REPO)]
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RUNYARD_HOST=host,
        PYTHONPATH=os.pathsep.join(path),
        # Several ranks share two cores: one thread each, as torchrun sets it.
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def run_job(
    argv: list[str],
    layout: Layout,
    *,
    style: EnvStyle = "torch",
    compat: bool = False,
    extra_env: dict[str, str] | None = None,
    timeout: float = 120,
) -> list[str]:
    """Runs every rank to the end; returns each rank's combined output, or fails with all
    of them when any rank exits non-zero."""
    port = free_port()
    processes = []
    for rank in range(len(layout.hosts)):
        env = rank_environment(layout, rank, port, style, compat=compat)
        env.update(extra_env or {})
        processes.append(
            subprocess.Popen(
                [sys.executable, *argv],
                env=env,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    deadline = time.monotonic() + timeout
    try:
        for process in processes:
            output, _ = process.communicate(timeout=max(deadline - time.monotonic(), 1))
            outputs.append(output)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    failed = [rank for rank, process in enumerate(processes) if process.returncode != 0]
    if failed:
        report = "\n".join(f"--- rank {rank} ---\n{out}" for rank, out in enumerate(outputs))
        raise AssertionError(f"ranks {failed} failed:\n{report}")
    return outputs
