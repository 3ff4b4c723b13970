"""Every metric the API and the worker record as things happen, named once.

They are made at import, after ``prometheus_client`` has read PROMETHEUS_MULTIPROC_DIR:
where several API processes serve one port, each writes its values to a file of that
directory and /metrics sums them (``service.observability.exposition``). The gauges
computed from the database at scrape time live in ``service.observability.jobs``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Seconds: from a cached token check (well under a millisecond) to a source upload.
_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

REQUESTS = Counter(
    "runyard_http_requests",
    "HTTP requests answered, by method, route template and status code.",
    ["method", "route", "status"],
)
REQUEST_SECONDS = Histogram(
    "runyard_http_request_duration_seconds",
    "Time from a request's arrival to its answer's last byte, by method and route template.",
    ["method", "route"],
    buckets=_LATENCY_BUCKETS,
)
LOG_LINES = Counter(
    "runyard_log_lines_ingested",
    "Log lines that instances sent and the API stored.",
)
LOG_BATCHES = Counter(
    "runyard_log_batches_ingested",
    "Batches of log lines that instances sent and the API stored.",
)
# "livesum": the connections of every live process, added together.
POOL_CHECKED_OUT = Gauge(
    "runyard_db_pool_checked_out",
    "Database connections in use, taken from the process's pool.",
    multiprocess_mode="livesum",
)
POOL_CAPACITY = Gauge(
    "runyard_db_pool_capacity",
    "Database connections the process's pool may hold at once (its size plus overflow).",
    multiprocess_mode="livesum",
)
RECONCILE_LAG = Histogram(
    "runyard_reconcile_lag_seconds",
    "Seconds from a trigger's sending (a job changed) to the worker starting to drive the "
    "jobs it names: the broker's and the worker's backlog together.",
    buckets=_LAG_BUCKETS,
)
RECONCILE_PASSES = Counter(
    "runyard_reconcile_passes",
    "Reconcile passes the worker ran, by the job's stage and outcome.",
    ["stage", "outcome"],
)
RECONCILE_SECONDS = Histogram(
    "runyard_reconcile_pass_duration_seconds",
    "Time one reconcile pass over one job took, by the job's stage.",
    ["stage"],
    buckets=_LATENCY_BUCKETS,
)
