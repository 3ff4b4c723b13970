"""Uploading source bundles: stored once, by content, where no job writes; hostile
archives refused; a dry run stores nothing."""

from __future__ import annotations

import io
import re
import shutil
import tarfile
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from contract import storage
from contract.archive import make_tarball
from service.jobs.spec_parts import NAME_PATTERN
from service.settings import Settings
from tests.archives import archive_of, archive_with_link, archive_with_member, gzip_bomb
from tests.conftest import job_spec

GZIP = {"Content-Type": "application/gzip"}


def test_upload_is_stored_by_content(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    bundle = make_tarball(source_dir, tmp_path / "code.tar.gz").read_bytes()
    first = api.post("/v1/sources", content=bundle, headers=GZIP)
    assert first.status_code == 201, first.text
    uri = first.json()["source_uri"]
    assert uri.startswith(settings.artifact_root + "/_sources/")
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
    assert not (storage.local_path(settings.artifact_root) / "_sources").exists()


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


def _packed_by_hand(source_dir: Path, target: Path, mtime: int) -> Path:
    """The files of ``source_dir`` packed as another tool would: reversed order, its own
    times, tarfile's own gzip header (which holds the time and the file name)."""
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(source_dir.rglob("*"), reverse=True):
            info = tar.gettarinfo(path, arcname=path.relative_to(source_dir).as_posix())
            info.mtime = mtime
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return target


def test_the_same_code_is_stored_once_however_it_was_packed(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    uris = {
        api.post("/v1/sources", content=bundle.read_bytes(), headers=GZIP).json()["source_uri"]
        for bundle in [
            make_tarball(source_dir, tmp_path / "ours.tar.gz"),
            _packed_by_hand(source_dir, tmp_path / "a.tar.gz", mtime=1_000_000_000),
            _packed_by_hand(source_dir, tmp_path / "b.tar.gz", mtime=1_700_000_000),
        ]
    }
    assert len(uris) == 1
    stored = storage.local_path(settings.artifact_root) / "_sources"
    assert [path.name for path in stored.iterdir()] == [uris.pop().rsplit("/", 1)[1]]

    (source_dir / "train.py").write_text("print('another version')\n")
    bundle = make_tarball(source_dir, tmp_path / "changed.tar.gz").read_bytes()
    api.post("/v1/sources", content=bundle, headers=GZIP)
    assert len(list(stored.iterdir())) == 2


def test_sources_are_kept_where_no_job_can_write_and_old_ones_still_work(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    bundle = make_tarball(source_dir, tmp_path / "code.tar.gz")
    uri = api.post("/v1/sources", content=bundle.read_bytes(), headers=GZIP).json()["source_uri"]
    # A job's model goes to <output_path>/<job name>/output/, the output path being the
    # artifact root unless the job names one: the folder must be no job's name.
    folder = uri.removeprefix(settings.artifact_root + "/").split("/")[0]
    assert not re.fullmatch(NAME_PATTERN, folder)
    # A job named like the old folder, and a job whose code was stored there before.
    legacy = storage.local_path(settings.artifact_root) / "sources" / f"{'0' * 64}.tar.gz"
    legacy.parent.mkdir(parents=True)
    shutil.copyfile(bundle, legacy)
    spec = job_spec(source_dir, name="sources", source_uri=legacy.as_uri())
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text


def test_a_hard_link_to_nothing_before_it_is_refused_at_upload(
    api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    bundle = tmp_path / "link.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        link = tarfile.TarInfo("train.py")
        link.type, link.linkname = tarfile.LNKTYPE, "lib/real_train.py"
        tar.addfile(link)
        real = tarfile.TarInfo("lib/real_train.py")
        real.size = 2
        tar.addfile(real, io.BytesIO(b"x\n"))
    response = api.post("/v1/sources", content=bundle.read_bytes(), headers=GZIP)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"][-1] == "body"
    assert (
        "'train.py': hard link to 'lib/real_train.py', which is not a file before it"
        in (error["msg"])
    )
    assert not (storage.local_path(settings.artifact_root) / "_sources").exists()


def test_a_dry_run_checks_the_bundle_and_stores_nothing(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    bundle = make_tarball(source_dir, tmp_path / "code.tar.gz").read_bytes()
    checked = api.post("/v1/sources", params={"dry_run": "true"}, content=bundle, headers=GZIP)
    assert checked.status_code == 200, checked.text
    uri = checked.json()["source_uri"]
    sources = storage.local_path(settings.artifact_root) / "_sources"
    assert not sources.exists()
    hostile = archive_with_member(tmp_path / "bad.tar.gz", "../escape.py").read_bytes()
    refused = api.post("/v1/sources", params={"dry_run": "true"}, content=hostile, headers=GZIP)
    assert refused.status_code == 422

    # The job's dry run plans with the code still to be uploaded; a submission needs it.
    plan = api.post(
        "/v1/training-jobs", params={"dry_run": "true"}, json=job_spec(source_dir, source_uri=uri)
    )
    assert plan.status_code == 200, plan.text
    assert uri in plan.json()["rendered"]
    assert not sources.exists()
    submitted = api.post("/v1/training-jobs", json=job_spec(source_dir, source_uri=uri))
    assert submitted.status_code == 422
    assert submitted.json()["detail"][0]["loc"] == ["body", "source_uri"]

    assert api.post("/v1/sources", content=bundle, headers=GZIP).json()["source_uri"] == uri
    assert (
        api.post("/v1/training-jobs", json=job_spec(source_dir, source_uri=uri)).status_code == 201
    )


def test_a_decompression_bomb_is_refused_quickly_and_nothing_is_stored(
    api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    # 2 MiB uploaded: 2 GiB of zeros, over the 1 GiB a bundle may unpack to by default,
    # and 256 MiB, under it but packed 1000:1 as no code is.
    over = gzip_bomb(tmp_path / "over.tar.gz", 2 * 1024**3).read_bytes()
    packed_too_well = gzip_bomb(tmp_path / "ratio.tar.gz", 256 * 1024**2).read_bytes()
    for bomb, why in [
        (over, "unpacks to more than 1073741824 bytes"),
        (packed_too_well, "unpacks to more than 200 times its packed size"),
    ]:
        started = time.monotonic()
        response = api.post("/v1/sources", content=bomb, headers=GZIP)
        assert time.monotonic() - started < 5
        assert response.status_code == 413, response.text
        assert why in response.json()["detail"]
    assert not (storage.local_path(settings.artifact_root) / "_sources").exists()


def test_the_unpacked_limit_is_a_setting(
    api: TestClient,
    settings: Settings,
    admin_token: str,
    source_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from service.app import create_app

    monkeypatch.setenv("RUNYARD_MAX_SOURCE_UNPACKED_BYTES", "1000")
    assert Settings(home=tmp_path / "env").max_source_unpacked_bytes == 1000
    (source_dir / "data.txt").write_text("x" * 2000)
    bundle = make_tarball(source_dir, tmp_path / "code.tar.gz").read_bytes()
    small = settings.model_copy(update={"max_source_unpacked_bytes": 1000})
    with TestClient(create_app(small)) as client:
        client.headers["Authorization"] = f"Bearer {admin_token}"
        refused = client.post("/v1/sources", content=bundle, headers=GZIP)
    assert refused.status_code == 413, refused.text
    assert "unpacks to more than 1000 bytes" in refused.json()["detail"]
    assert api.post("/v1/sources", content=bundle, headers=GZIP).status_code == 201


def test_names_that_cannot_unpack_are_refused_at_upload(
    api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    for name, why in [
        ("", "empty name"),
        ("/".join(["d"] * 2000), "path deeper than 64 directories"),
    ]:
        bundle = archive_with_member(tmp_path / "bad.tar.gz", name).read_bytes()
        response = api.post("/v1/sources", content=bundle, headers=GZIP)
        assert response.status_code == 422, response.text
        [error] = response.json()["detail"]
        assert error["loc"][-1] == "body"
        assert f"refused member {name[:200]!r}" in error["msg"]
        assert why in error["msg"]
    assert not (storage.local_path(settings.artifact_root) / "_sources").exists()


def test_a_directory_and_a_file_of_one_name_are_refused_at_upload(
    api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    members = [("pkg", tarfile.DIRTYPE), ("pkg", tarfile.REGTYPE)]
    bundle = archive_of(tmp_path / "clash.tar.gz", *members).read_bytes()
    response = api.post("/v1/sources", content=bundle, headers=GZIP)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert "refused member 'pkg': a file where a directory of that name came" in error["msg"]
    assert not (storage.local_path(settings.artifact_root) / "_sources").exists()
