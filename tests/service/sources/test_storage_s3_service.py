"""The API with an s3:// artifact root, against moto's server through the real boto3."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract.archive import make_tarball
from runyard.server import prepare
from service.app import create_app
from service.settings import Settings
from tests.aws import MotoServer
from tests.conftest import job_spec, make_settings

BUCKET = "artifacts"
ROOT = f"s3://{BUCKET}/runyard"
GZIP = {"Content-Type": "application/gzip"}


@pytest.fixture
def s3(s3_client: Any) -> Any:
    s3_client.create_bucket(Bucket=BUCKET)
    return s3_client


@pytest.fixture
def s3_settings(tmp_path: Path, database_url: str) -> Settings:
    return make_settings(tmp_path / "home", database_url, artifact_root=ROOT + "/")


@pytest.fixture
def s3_api(s3: Any, s3_settings: Settings) -> Iterator[TestClient]:
    token = prepare(s3_settings)
    with TestClient(create_app(s3_settings)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def _upload(api: TestClient, source_dir: Path, tmp_path: Path) -> tuple[str, bytes]:
    bundle = make_tarball(source_dir, tmp_path / "code.tar.gz").read_bytes()
    response = api.post("/v1/sources", content=bundle, headers=GZIP)
    assert response.status_code == 201, response.text
    uri: str = response.json()["source_uri"]
    return uri, bundle


def test_uploaded_source_lands_in_the_bucket(
    s3_api: TestClient, s3: Any, source_dir: Path, tmp_path: Path
) -> None:
    uri, bundle = _upload(s3_api, source_dir, tmp_path)
    assert uri.startswith(f"{ROOT}/_sources/")
    assert uri.endswith(".tar.gz")
    key = uri.removeprefix(f"s3://{BUCKET}/")
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == bundle
    # Stored by content: the same bytes again are the same object.
    again = s3_api.post("/v1/sources", content=bundle, headers=GZIP)
    assert again.json()["source_uri"] == uri


def test_a_job_with_s3_source_and_sharded_channel_is_accepted(
    s3_api: TestClient, s3: Any, source_dir: Path, tmp_path: Path
) -> None:
    uri, _ = _upload(s3_api, source_dir, tmp_path)
    s3.put_object(Bucket=BUCKET, Key="data/train/part-0", Body=b"1")
    channel = {"uri": f"s3://{BUCKET}/data/train", "distribution": "ShardedByS3Key"}
    response = s3_api.post(
        "/v1/training-jobs", json=job_spec(source_dir, source_uri=uri, inputs={"train": channel})
    )
    assert response.status_code == 201, response.text
    # With no output_path, the model goes under the S3 artifact root.
    stored = response.json()["spec"]
    assert stored["output_path"] == ROOT
    assert stored["inputs"]["train"]["distribution"] == "ShardedByS3Key"


def test_a_channel_with_nothing_under_it_is_accepted_and_a_malformed_one_refused(
    s3_api: TestClient, s3: Any, source_dir: Path, tmp_path: Path
) -> None:
    # As CreateTrainingJob: what is (or is not) under a channel's prefix is found out at
    # the download, where the job fails naming it (runtime.channels).
    uri, _ = _upload(s3_api, source_dir, tmp_path)
    for name, channel_uri in (("empty-1", f"s3://{BUCKET}/data/none"), ("empty-2", "s3://b2/x")):
        spec = job_spec(source_dir, name=name, source_uri=uri, inputs={"train": channel_uri})
        response = s3_api.post("/v1/training-jobs", json=spec)
        assert response.status_code == 201, response.text
    for channel_uri, why in (("s3:///data", "must name a bucket"), ("gs://b/x", "scheme")):
        spec = job_spec(source_dir, source_uri=uri, inputs={"train": channel_uri})
        response = s3_api.post("/v1/training-jobs", json=spec)
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["loc"] == ["body", "inputs", "train", "uri"]
        assert why in error["msg"]


def test_s3_sources_are_checked_for_the_entry_point(
    s3_api: TestClient, s3: Any, source_dir: Path, tmp_path: Path
) -> None:
    uri, _ = _upload(s3_api, source_dir, tmp_path)
    wrong_entry = s3_api.post(
        "/v1/training-jobs", json=job_spec(source_dir, source_uri=uri, entry_point="other.py")
    )
    assert wrong_entry.status_code == 422
    assert "entry_point" in wrong_entry.text
    # A prefix holding the code works as a directory does.
    s3.put_object(Bucket=BUCKET, Key="code/train.py", Body=b"print(1)")
    prefix = job_spec(source_dir, source_uri=f"s3://{BUCKET}/code", name="job-2")
    assert s3_api.post("/v1/training-jobs", json=prefix).status_code == 201
    missing = s3_api.post(
        "/v1/training-jobs", json=job_spec(source_dir, source_uri=f"s3://{BUCKET}/nope.tar.gz")
    )
    assert missing.status_code == 422
    assert "source_uri" in missing.text


def test_code_a_channel_brings_is_found_by_name_not_by_listing_the_channel(
    s3_api: TestClient, s3: Any, moto: MotoServer, source_dir: Path, tmp_path: Path
) -> None:
    """As the SageMaker SDK ships code with network isolation: a file of one of the
    job's channels. The channel may hold a data set of millions of objects: the file is
    looked up by its name (HEAD), the channel never listed."""
    bundle = make_tarball(source_dir, tmp_path / "sourcedir.tar.gz").read_bytes()
    s3.put_object(Bucket=BUCKET, Key="data/sourcedir.tar.gz", Body=bundle)
    for index in range(3):
        s3.put_object(Bucket=BUCKET, Key=f"data/part-{index}", Body=b"1")
    spec = job_spec(
        source_dir,
        source_uri="/opt/ml/input/data/train/sourcedir.tar.gz",
        inputs={"train": f"s3://{BUCKET}/data/"},
    )
    seen = moto.log.stat().st_size
    taken = s3_api.post("/v1/training-jobs", json=spec)
    missing = s3_api.post(
        "/v1/training-jobs",
        json={**spec, "name": "job-2", "source_uri": "/opt/ml/input/data/train/other.tar.gz"},
    )
    assert taken.status_code == 201, taken.text
    assert missing.status_code == 422, missing.text
    assert f"channel 'train' (s3://{BUCKET}/data/) holds no other.tar.gz" in missing.text
    with open(moto.log, "rb") as log:
        log.seek(seen)
        requests = log.read().decode(errors="replace").splitlines()
    assert any(f'"HEAD /{BUCKET}/data/sourcedir.tar.gz ' in line for line in requests)
    assert [line for line in requests if "prefix=data/&" in line] == []


def test_an_s3_source_over_the_upload_limit_is_refused(
    s3: Any, tmp_path: Path, database_url: str, source_dir: Path
) -> None:
    settings = make_settings(
        tmp_path / "home", database_url, artifact_root=ROOT, max_source_bytes=10
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(source_dir / "train.py", arcname="train.py")
    s3.put_object(Bucket=BUCKET, Key="big.tar.gz", Body=buffer.getvalue())
    with TestClient(create_app(settings)) as client:
        client.headers["Authorization"] = f"Bearer {prepare(settings)}"
        spec = job_spec(source_dir, source_uri=f"s3://{BUCKET}/big.tar.gz")
        response = client.post("/v1/training-jobs", json=spec)
    assert response.status_code == 422, response.text
    assert "larger than 10 bytes" in response.text


def test_an_output_path_in_a_missing_bucket_is_refused(
    s3_api: TestClient, s3: Any, source_dir: Path, tmp_path: Path
) -> None:
    uri, _ = _upload(s3_api, source_dir, tmp_path)
    spec = job_spec(source_dir, source_uri=uri, output_path="s3://no-bucket/models")
    response = s3_api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 422, response.text
    assert "output_path" in response.text
    assert "no such bucket" in response.text


def test_uploaded_sources_no_job_refers_to_are_deleted_from_the_bucket(
    s3_api: TestClient, s3: Any, s3_settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    from service.kit.db import session_scope, utcnow
    from service.sources.retention import prune_unreferenced

    used, _ = _upload(s3_api, source_dir, tmp_path)
    assert s3_api.post("/v1/training-jobs", json=job_spec(source_dir, source_uri=used)).is_success
    (source_dir / "train.py").write_text("print('unused')\n")
    unused, _ = _upload(s3_api, source_dir, tmp_path)
    # Objects cannot be made older here: the clock is moved instead.
    with session_scope(s3_settings.database_url, readonly=True) as session:
        assert prune_unreferenced(session, s3_settings, now=utcnow() + timedelta(days=1)) == []
        later = utcnow() + timedelta(days=s3_settings.source_retention_days + 1)
        assert prune_unreferenced(session, s3_settings, now=later) == [unused]
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys == [used.removeprefix(f"s3://{BUCKET}/")]
