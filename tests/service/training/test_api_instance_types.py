"""Instance types of the server's configuration (RUNYARD_INSTANCE_TYPES) through the API:
a job on one is checked, planned and stored as one on a built-in type is, and a type the
server does not have is refused naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from fastapi.testclient import TestClient

from contract import storage
from runyard.server import prepare
from service.app import create_app
from service.settings import Settings
from tests.conftest import job_spec, make_settings

KUBERNETES_VERSION = "1.37.0"
# Types SageMaker Training does not offer, which an operator adds.
GR6: dict[str, Any] = {
    "name": "ml.gr6.4xlarge",
    "vcpus": 16,
    "memory_gib": 128,
    "gpus": 1,
    "gpu_model": "L4",
    "node_selector": {"node.kubernetes.io/instance-type": "gr6.4xlarge"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}
M7A: dict[str, Any] = {"name": "ml.m7a.xlarge", "vcpus": 4, "memory_gib": 16}


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return make_settings(
        tmp_path / "home",
        database_url,
        instance_types=[GR6, M7A],
        backends={"local": "local", "ml.gr6.4xlarge": "kubernetes", "ml.m7a.xlarge": "local"},
        public_url="http://runyard-api.runyard.svc:8642",
        kubernetes={"artifact_volume_claim": "runyard-artifacts"},
    )


@pytest.fixture
def code(settings: Settings) -> Path:
    """A script under the artifact root, which the pods mount."""
    source = Path(storage.local_path(settings.artifact_root)) / "code"
    source.mkdir(parents=True)
    (source / "train.py").write_text("print('training')\n")
    return source


def test_a_dry_run_on_a_configured_type_plans_its_pods(api: TestClient, code: Path) -> None:
    spec = job_spec(code, instance_type="ml.gr6.4xlarge", instance_count=2)
    response = api.post("/v1/training-jobs", params={"dry_run": "true"}, json=spec)
    assert response.status_code == 200, response.text
    manifests = response.json()["plan"]["manifests"]
    for manifest in manifests:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    pods = [manifest["spec"] for manifest in manifests if manifest["kind"] == "Pod"]
    assert len(pods) == 2
    for pod in pods:
        limits = pod["containers"][0]["resources"]["limits"]
        assert (limits["cpu"], limits["memory"], limits["nvidia.com/gpu"]) == (
            "16",
            "131072Mi",
            "1",
        )
        assert pod["nodeSelector"] == GR6["node_selector"]
        assert pod["tolerations"] == GR6["tolerations"]
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_a_job_on_a_configured_type_is_stored_as_any_other(api: TestClient, code: Path) -> None:
    response = api.post("/v1/training-jobs", json=job_spec(code, instance_type="ml.m7a.xlarge"))
    assert response.status_code == 201, response.text
    job = api.get("/v1/training-jobs/job-1").json()
    assert (job["spec"]["instance_type"], job["backend"]) == ("ml.m7a.xlarge", "local")


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"instance_type": "ml.gr6.8xlarge"},
            "instance_type",
            "unknown instance type 'ml.gr6.8xlarge' (did you mean ml.gr6.4xlarge?); "
            "this server runs: local, ml.gr6.4xlarge, ml.m7a.xlarge",
        ),
        # Accelerators no local instance has: Kubernetes' or EC2's to run.
        (
            {"instance_type": "ml.gr6.4xlarge", "backend": "local"},
            "backend",
            "backend 'local' cannot run ml.gr6.4xlarge",
        ),
    ],
)
def test_a_type_the_server_cannot_run_is_refused_naming_the_field(
    api: TestClient, code: Path, spec: dict[str, Any], field: str, message: str
) -> None:
    response = api.post("/v1/training-jobs", json=job_spec(code, **spec))
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", field]
    assert error["msg"].startswith(message)
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_another_server_without_the_type_refuses_it(
    tmp_path: Path, database_url: str, code: Path
) -> None:
    # The catalog is each server's own: nothing of the other's reaches it.
    plain = make_settings(tmp_path / "plain", database_url)
    with TestClient(create_app(plain)) as other:
        other.headers["Authorization"] = f"Bearer {prepare(plain)}"
        response = other.post(
            "/v1/training-jobs", json=job_spec(code, instance_type="ml.m7a.xlarge")
        )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "instance_type"]
