"""What the instance has: CPUs and GPUs, detected rather than trusted from a catalog."""

from __future__ import annotations

import os
import shutil
import subprocess


def num_cpus() -> int:
    return len(os.sched_getaffinity(0)) or os.cpu_count() or 1


def num_gpus() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
