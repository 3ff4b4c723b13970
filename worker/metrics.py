"""The worker's /metrics (RUNYARD_WORKER_METRICS_PORT): its reconcile passes and lag and
its database pool, from a small HTTP server thread of prometheus_client's."""

from __future__ import annotations

from prometheus_client import start_http_server

from service.observability import exposition


def serve_metrics(port: int, address: str = "0.0.0.0") -> None:  # noqa: S104 (a pod's port)
    start_http_server(port, addr=address, registry=exposition.registry([]))
