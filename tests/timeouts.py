"""Time bounds for the tests: to end a hung test, never to judge speed (benches in bench/
do that).

httpx gives a request 5 s by default; a first request to a server a test started (its
lazy imports, its first database connection) can take longer on a 2-core machine that the
rest of the suite keeps busy.

A bound on a whole job or a whole test scales with how busy the machine is when it
starts (``scaled``): an SDK test whose fit takes 15 s on a quiet machine took 105 s with
the machine's two cores shared by sixteen runnable processes, and a fixed bound that
holds for the one fails for the other.
"""

from __future__ import annotations

import os

REQUEST_TIMEOUT = 60.0
# A bound is stretched at most this much, so that a real hang is still ended.
MOST_STRETCH = 4.0


def busy_factor() -> float:
    """How many times over the machine's processors are wanted now (the last minute's
    load average per processor), from 1 on a machine with room to MOST_STRETCH."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this system
        return 1.0
    return min(max(load / (os.cpu_count() or 1), 1.0), MOST_STRETCH)


def scaled(seconds: float) -> float:
    """``seconds``, the bound on a quiet machine, stretched for how busy it is now."""
    return seconds * busy_factor()
