"""Every input mode, Gzip and manifests are accepted; the data must still be there."""

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


def test_a_manifest_must_be_a_file_and_a_channel_must_exist(
    api: TestClient, source_dir: Path, tmp_path: Path
) -> None:
    for inputs, message in (
        (
            {"train": {"uri": tmp_path.as_uri(), "s3_data_type": "ManifestFile"}},
            f"{tmp_path.as_uri()} is not a manifest file or object",
        ),
        (
            {"train": {"uri": (tmp_path / "none").as_uri(), "input_mode": "Pipe"}},
            f"{(tmp_path / 'none').as_uri()} does not exist",
        ),
    ):
        response = api.post("/v1/training-jobs", json=job_spec(source_dir, inputs=inputs))
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["loc"][1:] == ["inputs", "train", "uri"]
        assert message in error["msg"]
