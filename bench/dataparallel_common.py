"""What both data-parallel benchmarks share: starting N ranks on 2 simulated instances
(the launcher's env contract, RUNYARD_HOST per instance) and reading rank 0's result."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
RESULT_PREFIX = "RESULT "


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def instances_for(processes: int) -> int:
    """Two instances whenever the processes split evenly, as the issue's layouts do."""
    return 2 if processes % 2 == 0 else 1


def launch(script: Path, processes: int, args: list[str], timeout: float = 1800) -> Any:
    """Runs ``script --worker args`` as ``processes`` ranks; returns what rank 0 reported."""
    instances = instances_for(processes)
    per_instance = processes // instances
    port = free_port()
    children = []
    for rank in range(processes):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(processes),
            "LOCAL_RANK": str(rank % per_instance),
            "LOCAL_WORLD_SIZE": str(per_instance),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RUNYARD_HOST": f"algo-{rank // per_instance + 1}",
            "PYTHONPATH": str(REPO),
            # One core per rank, as a GPU per rank would be: scaling stays readable.
            "OMP_NUM_THREADS": "1",
        }
        children.append(
            subprocess.Popen(
                [sys.executable, str(script), "--worker", *args],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [child.communicate(timeout=timeout)[0] for child in children]
    if any(child.returncode != 0 for child in children):
        raise SystemExit(f"a rank failed with {processes} processes:\n" + "\n".join(outputs))
    for line in outputs[0].splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line.removeprefix(RESULT_PREFIX))
    raise SystemExit("rank 0 reported nothing:\n" + outputs[0])


def report(result: Any) -> None:
    """Called by rank 0 of a worker."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def worker_device() -> torch.device:
    if torch.cuda.is_available():
        # The simulated instances share this machine's GPUs: one each, by global rank.
        index = int(os.environ["RANK"]) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def usable_process_counts(requested: list[int]) -> list[int]:
    """NCCL allows one rank per GPU: on CUDA, larger counts than the GPUs are skipped."""
    if not torch.cuda.is_available():
        return requested
    usable = [count for count in requested if count <= torch.cuda.device_count()]
    for count in sorted(set(requested) - set(usable)):
        print(f"skipping {count} processes: only {torch.cuda.device_count()} GPU(s)")
    return usable


def machine() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, NCCL"
    return f"{os.cpu_count()} CPU cores, gloo, 1 thread per rank"
