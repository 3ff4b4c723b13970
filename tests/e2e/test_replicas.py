"""The Helm layout: two API replicas and two workers on one PostgreSQL and Redis. Every
job is driven by one worker at a time (the lease), none is lost, and none runs twice."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

import pytest

from provisioning.local.backend import free_port
from runyard.client import Client, admin_token, wait_until_up
from tests import postgres
from tests.conftest import POSTGRES_ADMIN_URL, REDIS_URL
from tests.e2e.conftest import EXAMPLES, Stack, log_lines

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

JOBS = 8


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    with postgres.empty_database(POSTGRES_ADMIN_URL, "runyard_replicas") as database_url:
        home = tmp_path_factory.mktemp("runyard-replicas")
        stack = Stack(home, database_url, REDIS_URL).up()
        try:
            stack.start("worker", key="worker-2")
            port = free_port()
            # A replica of its own, as under Helm: its own home, the deployment's secret
            # key, admin token and artifact store.
            replica_home = home / "api-2"
            replica_home.mkdir()
            shared = {
                "RUNYARD_HOME": str(replica_home),
                "RUNYARD_SECRET_KEY": (home / "secret_key").read_text().strip(),
                "RUNYARD_ADMIN_TOKEN": admin_token(home),
                "RUNYARD_ARTIFACT_ROOT": (home / "artifacts").as_uri(),
            }
            second = stack.start("api", "--port", str(port), key="api-2", env=shared)
            url = f"http://127.0.0.1:{port}"
            if not wait_until_up(url, alive=lambda: second.poll() is None):
                raise RuntimeError(f"the second API did not start:\n{stack.log_tail('api-2')}")
            yield stack, url
            assert stack.down() == [], "processes of finished jobs were left running"
        finally:
            stack.down()


def test_jobs_through_two_apis_and_two_workers_each_run_once(
    replicas: tuple[Stack, str],
) -> None:
    stack, second_url = replicas
    with stack.client() as first, Client(second_url, admin_token(stack.home)) as second:
        source = first.upload_source(EXAMPLES / "scripts")
        for number in range(JOBS):
            api = (first, second)[number % 2]
            api.create_job(
                {
                    "name": f"replica-{number}",
                    "entry_point": "report_env.py",
                    "source_uri": source,
                    "instance_type": "local",
                    "instance_count": 2,
                }
            )
        jobs = [stack.wait_until_ended(first, f"replica-{n}", timeout=240) for n in range(JOBS)]
        for job in jobs:
            assert job["status"] == "Completed", stack.explain(job, [])
            assert (job["attempt"], job["restarts"]) == (0, 0), job["name"]
            secondaries = [t["secondary_status"] for t in job["transitions"]]
            assert len(secondaries) == len(set(secondaries)), secondaries
            # Each instance's script ran once: one report per host, no more.
            seen = [line for line in log_lines(second, job["name"]) if line.startswith("seen ")]
            hosts = Counter(re.search(r'"host": "(algo-\d)"', line).group(1) for line in seen)  # type: ignore[union-attr]
            assert hosts == {"algo-1": 1, "algo-2": 1}, seen
    # Both workers took part.
    for worker in ("worker", "worker-2"):
        assert "runyard.reconcile_jobs" in (stack.home / f"{worker}.log").read_text(), worker
