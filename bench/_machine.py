"""What the machine a bench ran on can do, printed beside its figures so that figures
from different machines can be compared."""

from __future__ import annotations

import os
import time
from pathlib import Path

# Iterations of the fixed loop: about 0.2 s on a 3 GHz core of 2024.
_LOOP = 2_000_000


def core_speed_ms(rounds: int = 5) -> float:
    """The best of ``rounds`` timings of a fixed pure-Python loop, in ms: one core's speed
    at running Python, lower is faster; the best, as other work on the machine only slows
    it."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        total = 0
        for step in range(_LOOP):
            total += step * step % 7
        best = min(best, time.perf_counter() - started)
    return best * 1000


def describe() -> str:
    """One line: the loop's time, the CPUs and the load at the moment."""
    load = os.getloadavg()[0]
    return (
        f"machine: a fixed Python loop takes {core_speed_ms():.0f} ms (best of 5; "
        f"lower is faster), {os.cpu_count()} CPUs, load average {load:.1f}"
    )


def process_cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used so far, its children left
    out; 0 once it has ended."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
