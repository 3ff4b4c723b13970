"""What watching the API costs: the CPU time the request middleware
(``service.observability.http.ObserveRequests``: a request id, a count and a latency
observation by route template) adds to each request, and the CPU time of one /metrics
scrape, job gauges included, as the number of jobs grows.

- per request: a bare ASGI route answered ``--requests`` times in this process, called
  directly (no socket, no HTTP parser), with and without the middleware around it: the
  difference is what the middleware costs; the median of ``--runs``;
- per scrape: ``exposition.render`` of the API's registry over a SQLite database holding
  ``--jobs`` job rows (copied from one submitted job), the median of ``--runs``.

    .venv/bin/python bench/observability_cost.py [--runs 5] [--requests 20000] [--jobs 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _server import REPO

sys.path.insert(0, str(REPO))

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route


def _app(observed: bool) -> Any:
    from service.observability.http import ObserveRequests

    async def item(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app: Any = Starlette(routes=[Route("/v1/items/{name}", item)])
    return ObserveRequests(app) if observed else app


async def _drive(app: Any, count: int) -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_message: dict[str, Any]) -> None:
        return None

    for n in range(count):
        scope = {
            "type": "http",
            "method": "GET",
            "path": f"/v1/items/item-{n}",
            "raw_path": b"",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"x-request-id", b"bench-1")],
            "scheme": "http",
            "server": ("127.0.0.1", 80),
        }
        await app(scope, receive, send)


def per_request_micros(observed: bool, count: int) -> float:
    app = _app(observed)
    started = time.process_time()
    asyncio.run(_drive(app, count))
    return (time.process_time() - started) / count * 1e6


def scrape_millis(jobs: int, runs: int) -> list[float]:
    from sqlalchemy import insert, select

    from service.jobs.models import TrainingJob
    from service.kit.db import session_scope
    from service.kit.migrate import upgrade
    from service.observability import exposition

    home = Path(tempfile.mkdtemp(prefix="runyard-bench-"))
    url = f"sqlite:///{home / 'runyard.db'}"
    upgrade(url)
    statuses = ["InProgress", "Completed", "Failed", "Stopped"]
    with session_scope(url) as session:
        rows = [
            {
                "id": uuid.uuid4().hex,
                "name": f"job-{n}",
                "spec": {},
                "backend": "local" if n % 3 else "kubernetes",
                "stage": "Queued" if n % 4 == 0 else "Ended",
                "status": statuses[n % 4],
                "secondary_status": "Starting",
                "project": "default",
                "version": 1,
            }
            for n in range(jobs)
        ]
        session.execute(insert(TrainingJob), rows)
        assert session.scalar(select(TrainingJob.id).limit(1))
    registry = exposition.api_registry(url)
    exposition.render(registry)  # the first opens the connection
    took = []
    for _ in range(runs):
        started = time.process_time()
        exposition.render(registry)
        took.append((time.process_time() - started) * 1e3)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--jobs", type=int, default=10000)
    args = parser.parse_args()
    bare = statistics.median(per_request_micros(False, args.requests) for _ in range(args.runs))
    observed = statistics.median(per_request_micros(True, args.requests) for _ in range(args.runs))
    print(f"per request, bare route:     {bare:8.1f} us CPU")
    print(f"per request, observed route: {observed:8.1f} us CPU")
    print(f"middleware cost:             {observed - bare:8.1f} us CPU per request")
    scrape = statistics.median(scrape_millis(args.jobs, args.runs))
    print(f"/metrics scrape, {args.jobs} jobs (SQLite): {scrape:8.2f} ms CPU")


if __name__ == "__main__":
    main()
