"""Gauges read from the database when Prometheus scrapes, not kept up by every path that
changes a job: how many jobs each status and backend holds, how many wait in line for
capacity and since when. Two grouped queries a scrape, whatever the number of jobs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from service.jobs.models import IN_LINE, TrainingJob
from service.kit.db import autocommit_reads, utcnow

log = logging.getLogger(__name__)

JOBS = "runyard_jobs"
QUEUE_DEPTH = "runyard_queue_depth"
QUEUE_OLDEST_WAIT = "runyard_queue_oldest_wait_seconds"
SCRAPE_ERRORS = "runyard_jobs_scrape_errors"


class JobsCollector(Collector):
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(JOBS, "Jobs by status and backend.", labels=["status", "backend"])
        depth = GaugeMetricFamily(
            QUEUE_DEPTH,
            "Jobs waiting in line for capacity (admitted by priority, then age), by backend.",
            labels=["backend"],
        )
        oldest = GaugeMetricFamily(
            QUEUE_OLDEST_WAIT,
            "Seconds the longest-waiting job in line has waited for admission, by backend.",
            labels=["backend"],
        )
        # A database that does not answer must not take the rest of /metrics with it: the
        # gauges are left out and this says so.
        failed = GaugeMetricFamily(
            SCRAPE_ERRORS, "1 when the last scrape could not read the jobs from the database."
        )
        try:
            by_status, in_line = self._read()
        except Exception:
            log.warning("could not read the jobs for /metrics", exc_info=True)
            failed.add_metric([], 1)
            yield failed
            return
        for (status, backend), count in sorted(by_status.items()):
            jobs.add_metric([status, backend], count)
        now = utcnow()
        for backend, (count, since) in sorted(in_line.items()):
            depth.add_metric([backend], count)
            oldest.add_metric([backend], max(0.0, (now - since).total_seconds()))
        failed.add_metric([], 0)
        yield from (jobs, depth, oldest, failed)

    def _read(
        self,
    ) -> tuple[dict[tuple[str, str], int], dict[str, tuple[int, datetime]]]:
        job = TrainingJob
        with autocommit_reads(self.database_url) as session:
            statuses = session.execute(
                select(job.status, job.backend, func.count()).group_by(job.status, job.backend)
            ).all()
            line = session.execute(
                select(job.backend, func.count(), func.min(job.created_at))
                .where(IN_LINE)
                .group_by(job.backend)
            ).all()
        return (
            {(status, backend): count for status, backend, count in statuses},
            {backend: (count, since) for backend, count, since in line},
        )
