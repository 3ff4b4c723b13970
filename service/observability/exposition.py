"""/metrics: what this process (or, with several API processes on one port, every one of
them) recorded, and the job gauges read from the database at the moment of the scrape.

/metrics answers without a token, as Prometheus scrapes: it holds counts by status,
backend and route template, and no job's, project's or user's name (docs/monitoring.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from service.observability.jobs import JobsCollector

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST


class _Recorded(Collector):
    """What the processes recorded: this one's own registry, or every process's files."""

    def collect(self) -> Iterator[Metric]:
        directory = os.environ.get(MULTIPROCESS_DIR)
        if directory:
            files = multiprocess.MultiProcessCollector(None, path=directory)  # type: ignore[no-untyped-call]
            yield from files.collect()  # type: ignore[no-untyped-call]
        else:
            yield from REGISTRY.collect()


def registry(collectors: Iterable[Collector]) -> CollectorRegistry:
    # Not described at registration: the job gauges would query the database to learn
    # their names.
    built = CollectorRegistry(auto_describe=False)
    built.register(_Recorded())
    for collector in collectors:
        built.register(collector)
    return built


def api_registry(database_url: str) -> CollectorRegistry:
    return registry([JobsCollector(database_url)])


def render(metrics: CollectorRegistry) -> bytes:
    return generate_latest(metrics)
