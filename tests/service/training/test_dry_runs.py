"""A dry run (``runyard submit --dry-run``, the console's "Preview (dry run)", both the API's
``dry_run=true``) plans and launches nothing: it asks neither pip nor the machine's
routes, so whatever this machine's state it answers 200 with the plan (what only a launch
decides shown as decided at launch), or 422 saying why the job's backend cannot plan it;
never 500. What only a launch can decide, it decides there, and a job it cannot launch
fails saying why."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from provisioning import registry
from provisioning.base import (
    DECIDED_AT_LAUNCH,
    LaunchError,
    LaunchRequest,
    Materialized,
)
from provisioning.local import image_store
from provisioning.plugin import BackendPlugin
from runyard.server import prepare
from service.app import create_app
from tests.conftest import job_spec, make_settings
from tests.inert_backend import InertBackend
from tests.wheels import offline

# What the server's pip is, by the state a test puts it in: an index without the
# framework's version (asked, pip says there is no such build), or an index that no one
# serves (asked, pip cannot say).
_NO_INDEX = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple/", "PIP_RETRIES": "0", "PIP_TIMEOUT": "1"}
_PIP = ["no-build", "no-index"]


@pytest.mark.parametrize("pip", _PIP)
def test_a_dry_run_asks_pip_nothing_and_shows_the_image_as_named(
    tmp_path: Path,
    database_url: str,
    source_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    pip: str,
) -> None:
    """With RUNYARD_IMAGE_FALLBACK=refuse, a launch that asked pip could end in the job's
    refusal: the plan says so, and nothing was asked."""
    for name in ("PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (
        offline(tmp_path / "no-wheels") if pip == "no-build" else _NO_INDEX
    ).items():
        monkeypatch.setenv(name, value)
    settings = make_settings(tmp_path / "home", database_url, image_fallback="refuse")
    with TestClient(create_app(settings)) as api:
        api.headers["Authorization"] = f"Bearer {prepare(settings)}"
        reply = api.post(
            "/v1/training-jobs",
            params={"dry_run": "true"},
            json=job_spec(source_dir, framework_version="1.12"),
        )
    assert reply.status_code == 200, reply.text
    plan = reply.json()["plan"]
    python = settings.catalog.python
    assert plan["image"] == f"pytorch-training:1.12.1-cpu-py{python.replace('.', '')}"
    assert plan["image_note"] == (
        f"{DECIDED_AT_LAUNCH}: whether this server's package index has torch==1.12.1 for "
        f"Python {python} (pip is asked); where it has not, the job is refused then"
    )
    assert image_store(settings).index.remembered("torch==1.12.1", python) is None


# The API and the worker in a network namespace of their own (the test's), whose machine
# is on two networks that share the pool of job subnets between them: no /24 of it is
# free. A dry run
# plans the job; submitted, it fails at its launch, saying why.
_NO_FREE_SUBNET = """
import json, subprocess, sys
from pathlib import Path
from fastapi.testclient import TestClient
from provisioning.local import addresses
from runyard.server import prepare
from service.app import create_app
from tests.conftest import job_spec, make_settings
from tests.inert_backend import InertBackend
from worker.reconciler import Reconciler

pool = addresses.DEFAULT_POOL
subprocess.run(["ip", "link", "add", "rypool0", "type", "bridge"], check=True)
for half in pool.subnets(prefixlen_diff=1):
    subprocess.run(["ip", "address", "add", f"{half[1]}/{half.prefixlen}", "dev", "rypool0"],
                   check=True)
subprocess.run(["ip", "link", "set", "rypool0", "up"], check=True)
where = Path(sys.argv[1])
settings = make_settings(where / "home", sys.argv[2])
spec = job_spec(where / "src", instance_count=2)
with TestClient(create_app(settings)) as api:
    api.headers["Authorization"] = f"Bearer {prepare(settings)}"
    planned = api.post("/v1/training-jobs", params={"dry_run": "true"}, json=spec)
    created = api.post("/v1/training-jobs", json=spec)
    Reconciler(settings).reconcile(created.json()["id"])
    job = api.get("/v1/training-jobs/job-1").json()
shown = planned.json()["plan"]["network"] if planned.status_code == 200 else planned.text
print(json.dumps({
    "planned": planned.status_code,
    "network": shown,
    "status": job["status"],
    "reason": job["failure_reason"],
}))
"""


@pytest.mark.nftables
@pytest.mark.usefixtures("source_dir")
def test_a_dry_run_with_no_free_subnet_plans_the_network_and_the_launch_fails(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    database = tmp_path / "runyard.db"
    shutil.copyfile(request.getfixturevalue("_migrated_sqlite"), database)
    run = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", _NO_FREE_SUBNET, str(tmp_path),
         f"sqlite:///{database}"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[3],
        timeout=300,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.splitlines()[-1])
    assert found["planned"] == 200, found["network"]
    network = found["network"]
    assert network["subnet"] == DECIDED_AT_LAUNCH
    assert [port["address"] for port in network["ports"]] == [DECIDED_AT_LAUNCH] * 2
    assert network["egress"]["gateway"] == DECIDED_AT_LAUNCH
    assert network["egress"]["api_addresses"] == [DECIDED_AT_LAUNCH]
    assert (found["status"], found["reason"]) == (
        "Failed",
        "LaunchError: no subnet for the job's network: every /24 of 10.213.0.0/16 is taken: "
        "too many jobs at once",
    )


class _Unplannable(InertBackend):
    """A backend whose provider refuses to plan anything (a quota read at planning)."""

    name = "unplannable"

    def materialize(self, request: LaunchRequest) -> Materialized[dict[str, Any]]:
        raise LaunchError("the provider refuses: no quota for ml.m5.large in this account")

    def apply(self, materialized: Materialized[dict[str, Any]]) -> None:
        raise AssertionError("a dry run applies nothing")


def test_a_backend_that_cannot_plan_the_job_is_a_422_naming_why(
    tmp_path: Path, database_url: str, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = BackendPlugin(
        name=_Unplannable.name,
        instance_types=lambda catalog: frozenset({"ml.m5.large"}),
        build=lambda server: _Unplannable(),
        teardown_budget=lambda server: 1.0,
    )
    monkeypatch.setitem(registry.PLUGINS, record.name, record)
    settings = make_settings(
        tmp_path / "home", database_url, backends={"local": "local", "ml.m5.large": record.name}
    )
    with TestClient(create_app(settings)) as api:
        api.headers["Authorization"] = f"Bearer {prepare(settings)}"
        reply = api.post(
            "/v1/training-jobs",
            params={"dry_run": "true"},
            json=job_spec(source_dir, instance_type="ml.m5.large"),
        )
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"] == [
        {
            "loc": ["body", "backend"],
            "msg": "the unplannable backend cannot plan this job here: the provider refuses: "
            "no quota for ml.m5.large in this account",
            "type": "value_error",
        }
    ]


def test_a_dry_run_answers_the_job_as_it_would_be_stored_with_its_hosts(
    api: TestClient, source_dir: Path
) -> None:
    spec = job_spec(source_dir, instance_count=3, environment={"DB_PASSWORD": "s3cret", "X": "1"})
    reply = api.post("/v1/training-jobs", params={"dry_run": "true"}, json=spec)
    assert reply.status_code == 200, reply.text
    planned = reply.json()
    assert planned["hosts"] == ["algo-1", "algo-2", "algo-3"]
    # What a created job's spec would read: defaults filled, the image chosen, the output
    # path the server picked; a credential masked, as in the plan.
    resolved = planned["spec"]
    created = api.post("/v1/training-jobs", json=spec)
    assert created.status_code == 201, created.text
    stored = api.get("/v1/training-jobs/job-1").json()["spec"]
    assert resolved == {**stored, "environment": {"DB_PASSWORD": "<redacted>", "X": "1"}}
    assert resolved["max_run"] == 86400
    assert resolved["image"]["name"] == stored["image"]["name"]
