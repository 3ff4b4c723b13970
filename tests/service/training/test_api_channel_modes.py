"""Every input mode, Gzip and manifests are accepted; whether the data is there, the
instances find out (a manifest or channel that is not fails the job at its download)."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from tests.conftest import job_spec


def test_pipe_fastfile_gzip_and_manifest_channels_are_accepted(
    api: TestClient, source_dir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv.gz").write_bytes(b"")
    manifest = tmp_path / "train.manifest"
    manifest.write_text(json.dumps([{"prefix": f"{data.as_uri()}/"}, "a.csv.gz"]))
    inputs = {
        "pipe": {"uri": data.as_uri(), "input_mode": "Pipe", "compression": "Gzip"},
        "fast": {"uri": data.as_uri(), "input_mode": "FastFile", "content_type": "text/csv"},
        "listed": {"uri": manifest.as_uri(), "s3_data_type": "ManifestFile"},
    }
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, inputs=inputs))
    assert response.status_code == 201, response.text
    stored = response.json()["spec"]["inputs"]
    assert stored["pipe"]["input_mode"] == "Pipe"
    assert stored["pipe"]["compression"] == "Gzip"
    assert stored["fast"]["input_mode"] == "FastFile"
    assert stored["listed"]["s3_data_type"] == "ManifestFile"


def test_a_channels_data_is_the_instances_to_find_its_uri_is_checked_here(
    api: TestClient, source_dir: Path, tmp_path: Path
) -> None:
    accepted = (
        {"train": {"uri": tmp_path.as_uri(), "s3_data_type": "ManifestFile"}},
        {"train": {"uri": (tmp_path / "none").as_uri(), "input_mode": "Pipe"}},
    )
    for number, inputs in enumerate(accepted):
        spec = job_spec(source_dir, name=f"job-{number}", inputs=inputs)
        response = api.post("/v1/training-jobs", json=spec)
        assert response.status_code == 201, response.text
    refused = {"train": {"uri": "file://relative/data", "input_mode": "Pipe"}}
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, inputs=refused))
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"][1:] == ["inputs", "train", "uri"]
    assert "must not name a host" in error["msg"]
