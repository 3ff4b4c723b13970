"""Uploading source bundles: stored once, by content, and hostile archives refused."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from runtime import storage
from runtime.archive import make_tarball
from service.settings import Settings
from tests.archives import archive_with_link, archive_with_member

GZIP = {"Content-Type": "application/gzip"}


def test_upload_is_stored_by_content(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    bundle = make_tarball(source_dir, tmp_path / "code.tar.gz").read_bytes()
    first = api.post("/v1/sources", content=bundle, headers=GZIP)
    assert first.status_code == 201, first.text
    uri = first.json()["source_uri"]
    assert uri.startswith(settings.artifact_root + "/sources/")
    assert storage.local_path(uri).read_bytes() == bundle
    assert api.post("/v1/sources", content=bundle, headers=GZIP).json()["source_uri"] == uri


def test_hostile_uploads_are_refused_and_nothing_is_stored(
    api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    hostile = [
        archive_with_member(tmp_path / "dotdot.tar.gz", "../../escape.py"),
        archive_with_member(tmp_path / "absolute.tar.gz", "/tmp/escape.py"),
        archive_with_link(tmp_path / "symlink.tar.gz", "link", "/etc/passwd"),
        archive_with_link(tmp_path / "hardlink.tar.gz", "link", "../outside", hard=True),
    ]
    for bundle in hostile:
        response = api.post("/v1/sources", content=bundle.read_bytes(), headers=GZIP)
        assert response.status_code == 422, (bundle.name, response.text)
    not_an_archive = api.post("/v1/sources", content=b"just some bytes", headers=GZIP)
    assert not_an_archive.status_code == 422
    assert api.post("/v1/sources", content=b"", headers=GZIP).status_code == 422
    assert not (storage.local_path(settings.artifact_root) / "sources").exists()


def test_upload_over_the_size_limit_is_refused(
    tmp_path: Path, settings: Settings, admin_token: str
) -> None:
    from service.app import create_app

    small = settings.model_copy(update={"max_source_bytes": 100})
    with TestClient(create_app(small)) as client:
        response = client.post(
            "/v1/sources",
            content=b"x" * 1000,
            headers={**GZIP, "Authorization": f"Bearer {admin_token}"},
        )
    assert response.status_code == 413
