"""A real job on the local backend, with its instances sampling themselves every second:
each host's CPU, memory and disk reach the metrics route and CloudWatch."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Stack
from tests.timeouts import REQUEST_TIMEOUT

pytestmark = pytest.mark.e2e

STACK_SETTINGS = {"RUNYARD_INSTANCE_METRICS_SECONDS": "1"}
# Burns the CPU for four seconds of the script's clock: a few samples' worth.
SCRIPT = """
import time
end = time.monotonic() + 4
while time.monotonic() < end:
    pass
print("done")
"""


def test_a_jobs_instances_measure_themselves(stack: Stack, tmp_path: Path) -> None:
    source = tmp_path / "burn"
    source.mkdir()
    (source / "train.py").write_text(SCRIPT)
    with stack.client() as client:
        stack.submit(client, source, name="burn-1", entry_point="train.py", instance_count=2)
        job = stack.wait_until_ended(client, "burn-1")
        assert job["status"] == "Completed", stack.explain(job, list(client.logs("burn-1")))
        response = httpx.get(
            f"{stack.url}/v1/training-jobs/burn-1/metrics",
            params={"kind": "instance"},
            headers={"Authorization": f"Bearer {client.token}"},
            timeout=REQUEST_TIMEOUT,
        )
    assert response.status_code == 200, response.text
    series = {item["name"]: item["points"] for item in response.json()["metrics"]}
    assert {"CPUUtilization", "MemoryUtilization", "DiskUtilization"} <= set(series)
    for points in series.values():
        assert {point["host"] for point in points} == {"algo-1", "algo-2"}
    # Each host's script burned a CPU for seconds: some sample saw a good part of one (on
    # a loaded 2-core machine, two burning hosts and other tests share it; idle reads ~0).
    for host in ("algo-1", "algo-2"):
        busiest = max(p["value"] for p in series["CPUUtilization"] if p["host"] == host)
        assert busiest > 10.0, series["CPUUtilization"]
    assert all(0 < p["value"] < 100 for p in series["MemoryUtilization"])
