"""What the Kubernetes backend costs the control plane: API calls and seconds per step.

Against an in-memory Kubernetes API server (kmock), so the figures are Runyard's own
overhead (building manifests, the client, HTTP round trips), not a cluster's scheduling.
For jobs of 1, 4 and 16 instances: the time to submit (create every object), one describe
(what each reconcile pass does), and a teardown, with the number of API requests each made.
Median of 5 runs.

    .venv/bin/python bench/kubernetes_calls.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provisioning.base import JobRef, LaunchRequest
from provisioning.kubernetes.backend import KubernetesBackend
from provisioning.kubernetes.client import shared_client
from provisioning.kubernetes.settings import KubernetesSettings
from service.jobs.record import JobRecord
from tests.kube import KubeServer


def _request(instances: int) -> LaunchRequest:
    job_id = uuid.uuid4().hex
    spec = JobRecord.model_validate(
        {
            "name": f"bench-{job_id[:6]}",
            "entry_point": "train.py",
            "source_uri": "file:///srv/artifacts/sources/x.tar.gz",
            "instance_type": "ml.g5.xlarge",
            "instance_count": instances,
            "distribution": {"torch_distributed": {"enabled": True}},
            "output_path": "file:///srv/artifacts",
        }
    )
    job = JobRef(job_id, spec.name)
    return LaunchRequest(job, spec.job_spec(), "http://api:8642", "token")


def _timed(server: KubeServer, step: Any) -> tuple[float, int]:
    before = len(list(server.emulator))
    started = time.perf_counter()
    step()
    return time.perf_counter() - started, len(list(server.emulator)) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    server = KubeServer().start()
    try:
        settings = KubernetesSettings(api_url=server.url)
        backend = KubernetesBackend(
            lambda: shared_client(settings.model_dump_json()),
            settings,
            artifact_root="file:///srv/artifacts",
            stop_grace=0,
            teardown_grace=0,
            poll_interval=0.01,
        )
        print(f"{'instances':>9} {'submit':>14} {'describe':>14} {'teardown':>14}")
        for instances in (1, 4, 16):
            rows: dict[str, list[tuple[float, int]]] = {"submit": [], "describe": [], "down": []}
            for _ in range(args.runs):
                request = _request(instances)
                rows["submit"].append(_timed(server, lambda r=request: backend.submit(r)))
                rows["describe"].append(_timed(server, lambda r=request: backend.describe(r.job)))
                rows["down"].append(_timed(server, lambda r=request: backend.teardown(r.job)))
            cells = []
            for step in ("submit", "describe", "down"):
                seconds = statistics.median(t for t, _ in rows[step])
                calls = statistics.median(n for _, n in rows[step])
                cells.append(f"{seconds * 1000:7.1f} ms/{calls:3.0f}")
            print(f"{instances:>9} " + " ".join(f"{cell:>14}" for cell in cells))
        print("(median milliseconds / API requests)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
