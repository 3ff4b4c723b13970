"""What the console's submit form reads: the instance types this server offers, and a job's
spec to submit a copy of it, without what the server chose for the job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from runyard.server import prepare
from service.app import create_app
from service.settings import Settings
from tests.conftest import job_spec, make_settings


def test_the_offered_types_are_the_backends_own(
    tmp_path: Path, database_url: str, source_dir: Path
) -> None:
    settings = make_settings(
        tmp_path / "home",
        database_url,
        # ml.p4d.24xlarge and ml.g6e.xlarge have GPUs: the local backend cannot start them,
        # so they are not offered.
        backends={
            "local": "local",
            "ml.m5.large": "local",
            "ml.m4.xlarge": "local",
            "ml.p4d.24xlarge": "local",
            "ml.g6e.xlarge": "local",
        },
        capacity={"ml.m5.large": 2},
        max_instance_count=4,
    )
    with TestClient(create_app(settings)) as api:
        api.headers["Authorization"] = f"Bearer {prepare(settings)}"
        offer = api.get("/v1/instance-types").json()
        assert offer["max_instance_count"] == 4
        by_name = {kind["name"]: kind for kind in offer["types"]}
        assert sorted(by_name) == ["local", "ml.m4.xlarge", "ml.m5.large"]
        assert by_name["ml.m5.large"] == {
            "name": "ml.m5.large",
            "backend": "local",
            "vcpus": 2,
            "memory_gib": 8.0,
            "gpus": 0,
            "gpu_model": None,
            "capacity": 2,
        }
        assert by_name["local"]["capacity"] is None
        # Each one offered is taken by a dry run.
        for name in by_name:
            spec = job_spec(source_dir, name="planned", instance_type=name)
            planned = api.post("/v1/training-jobs", params={"dry_run": "true"}, json=spec)
            assert planned.status_code == 200, planned.text
        api.headers.pop("Authorization")
        assert api.get("/v1/instance-types").status_code == 401


def _clone(api: TestClient, source_dir: Path, **spec: Any) -> dict[str, Any]:
    created = api.post("/v1/training-jobs", json=job_spec(source_dir, **spec))
    assert created.status_code == 201, created.text
    response = api.get(f"/v1/training-jobs/{created.json()['name']}/clone")
    assert response.status_code == 200, response.text
    clone: dict[str, Any] = response.json()
    return clone


def test_a_clone_leaves_out_what_the_server_chose(api: TestClient, source_dir: Path) -> None:
    parameters = {"pipeline": "interleaved", "microbatches": 2, "partitions": 2}
    clone = _clone(
        api,
        source_dir,
        name="original",
        instance_count=2,
        hyperparameters={"epochs": 3, "lr": 0.1},
        distribution={
            "mpi": {"enabled": True},
            "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
        },
        inputs={"train": {"uri": source_dir.as_uri(), "input_mode": "FastFile"}},
        tags=[{"key": "team", "value": "vision"}],
    )
    for chosen in ("name", "image", "backend", "output_path"):
        assert chosen not in clone
    # The hyperparameter the mode handed the script is the mode's to add again.
    assert clone["hyperparameters"] == {"epochs": 3, "lr": 0.1}
    assert clone["distribution"]["smdistributed"]["modelparallel"]["parameters"] == parameters
    assert clone["inputs"]["train"]["input_mode"] == "FastFile"
    assert clone["tags"] == [{"key": "team", "value": "vision"}]

    # Submitted as it is, with a name of its own, it is the same job again.
    again = api.post("/v1/training-jobs", json={**clone, "name": "copy"})
    assert again.status_code == 201, again.text
    original = api.get("/v1/training-jobs/original").json()
    for same in ("hyperparameters", "distribution", "inputs", "output_path", "image", "backend"):
        assert again.json()["spec"][same] == original["spec"][same], same


def test_a_clone_keeps_what_the_client_chose(
    api: TestClient, source_dir: Path, tmp_path: Path
) -> None:
    output = (tmp_path / "out").as_uri()
    clone = _clone(
        api,
        source_dir,
        output_path=output,
        backend="local",
        hyperparameters={"mp_parameters": {"mine": 1}},
    )
    assert clone["output_path"] == output
    # The backend the server would pick anyway is left to it; a hyperparameter no mode
    # added is the client's own.
    assert "backend" not in clone
    assert clone["hyperparameters"] == {"mp_parameters": {"mine": 1}}


@pytest.mark.parametrize("path", ["/v1/training-jobs/nope/clone", "/v1/training-jobs/Bad_/clone"])
def test_a_clone_of_no_job_is_refused(api: TestClient, path: str, settings: Settings) -> None:
    assert api.get(path).status_code in (404, 422)
