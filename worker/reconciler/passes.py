"""Each reconcile pass counted and timed by the stage it found the job in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from service.observability import instruments
from worker.reconciler.snapshot import Superseded


@contextmanager
def counting_pass(stage: str) -> Iterator[None]:
    started = time.perf_counter()
    outcome = "error"
    try:
        yield
        outcome = "done"
    except Superseded:
        # Another writer changed the job first: the next pass reads it again.
        outcome = "superseded"
        raise
    finally:
        instruments.RECONCILE_PASSES.labels(str(stage), outcome).inc()
        instruments.RECONCILE_SECONDS.labels(str(stage)).observe(time.perf_counter() - started)
