"""file:// URIs stay inside the directories the server allows (RUNYARD_FILE_ROOTS and the
artifact root), for every field that takes one, in submissions and dry runs alike; a
refusal says the same whether or not the path exists."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from runyard.server import prepare
from service.app import create_app
from service.settings import Settings
from tests.conftest import job_spec, make_settings

Spec = Callable[[str], dict[str, Any]]


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    """The one root the administrator configured, holding code and data."""
    root = tmp_path / "allowed"
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("print('hi')\n")
    (root / "data").mkdir()
    (root / "data" / "part-0").write_text("1\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the root, with code and data in it too."""
    root = tmp_path / "outside"
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("print('hi')\n")
    (root / "data").mkdir()
    return root


@pytest.fixture
def settings(tmp_path: Path, database_url: str, allowed: Path) -> Settings:
    return make_settings(tmp_path / "home", database_url, file_roots=[allowed])


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    token = prepare(settings)
    with TestClient(create_app(settings)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def _spec(allowed: Path, **overrides: Any) -> dict[str, Any]:
    return job_spec(allowed / "src", **overrides)


# Each field that takes a file:// URI: how a spec gives it, and the field a refusal names.
FIELDS: dict[str, tuple[Callable[[Path, str], dict[str, Any]], list[Any]]] = {
    "source_uri": (lambda root, uri: _spec(root, source_uri=uri), ["source_uri"]),
    "inputs": (lambda root, uri: _spec(root, inputs={"train": uri}), ["inputs", "train", "uri"]),
    "manifest": (
        lambda root, uri: _spec(
            root, inputs={"train": {"uri": uri, "s3_data_type": "ManifestFile"}}
        ),
        ["inputs", "train", "uri"],
    ),
    "output_path": (lambda root, uri: _spec(root, output_path=uri), ["output_path"]),
    "checkpoint_s3_uri": (
        lambda root, uri: _spec(root, checkpoint_s3_uri=uri),
        ["checkpoint_s3_uri"],
    ),
}
INSIDE = {
    "source_uri": "src",
    "inputs": "data",
    "manifest": "data/part-0",
    "output_path": "output",
    "checkpoint_s3_uri": "checkpoints",
}


def _post(api: TestClient, spec: dict[str, Any], dry_run: bool) -> Any:
    params = {"dry_run": "true"} if dry_run else {}
    return api.post("/v1/training-jobs", params=params, json=spec)


@pytest.mark.parametrize("dry_run", [False, True], ids=["submit", "dry-run"])
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_uri_inside_a_root_is_accepted(
    api: TestClient, allowed: Path, field: str, dry_run: bool
) -> None:
    make, _ = FIELDS[field]
    response = _post(api, make(allowed, (allowed / INSIDE[field]).as_uri()), dry_run)
    assert response.status_code in (200, 201), response.text


def _escapes(allowed: Path, outside: Path, tmp_path: Path) -> dict[str, str]:
    link = allowed / "link"
    if not link.exists():
        link.symlink_to(outside)
    quoted = allowed.as_uri()
    return {
        "absolute": (outside / "src").as_uri(),
        "dot-dot": f"{quoted}/../outside/src",
        "percent-encoded dot-dot": f"{quoted}/%2e%2e/outside/src",
        "percent-encoded slash": f"{quoted}/..%2F..%2F{tmp_path.name}/outside/src",
        "symlink": f"{quoted}/link/src",
        "root prefix": f"{quoted}-not/src",
        "system file": "file:///etc/passwd",
        "localhost": f"file://localhost{outside / 'src'}",
    }


ESCAPES = [
    "absolute",
    "dot-dot",
    "percent-encoded dot-dot",
    "percent-encoded slash",
    "symlink",
    "root prefix",
    "system file",
    "localhost",
]


@pytest.mark.parametrize("dry_run", [False, True], ids=["submit", "dry-run"])
@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_uri_that_leaves_every_root_is_refused_naming_the_field(
    api: TestClient,
    allowed: Path,
    outside: Path,
    tmp_path: Path,
    field: str,
    escape: str,
    dry_run: bool,
) -> None:
    make, loc = FIELDS[field]
    response = _post(api, make(allowed, _escapes(allowed, outside, tmp_path)[escape]), dry_run)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", *loc]
    assert "outside the directories" in error["msg"] or "through a link" in error["msg"]
    # The server's own paths (the roots) are not told: only the URI the client sent.
    assert str(allowed) not in error["msg"].split(": ", 1)[1]
    assert api.get("/v1/training-jobs").json()["items"] == []


@pytest.mark.parametrize("dry_run", [False, True], ids=["submit", "dry-run"])
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_refusal_tells_nothing_of_what_exists_outside(
    api: TestClient, allowed: Path, outside: Path, field: str, dry_run: bool
) -> None:
    make, _ = FIELDS[field]
    unwritable = outside / "locked"
    unwritable.mkdir()
    unwritable.chmod(0o500)
    (outside / "a-file").write_text("")
    candidates = {
        "missing": outside / "missing" / "deeper",
        "a directory": outside / "src",
        "a file": outside / "a-file",
        "below a file": outside / "a-file" / "x",
        "unwritable": unwritable / "x",
    }
    replies = {}
    for what, path in candidates.items():
        response = _post(api, make(allowed, path.as_uri()), dry_run)
        assert response.status_code == 422, (what, response.text)
        replies[what] = response.text.replace(path.as_uri(), "<uri>")
    assert len(set(replies.values())) == 1, replies


def test_the_servers_own_artifact_root_works_without_being_configured(
    api: TestClient, settings: Settings, allowed: Path
) -> None:
    # Not in file_roots as given: the default output path is the artifact root.
    assert Path(settings.artifact_root.removeprefix("file://")) in settings.file_roots
    response = api.post("/v1/training-jobs", json=_spec(allowed))
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["output_path"] == settings.artifact_root
    below = api.post(
        "/v1/training-jobs",
        json=_spec(allowed, name="job-2", output_path=f"{settings.artifact_root}/mine"),
    )
    assert below.status_code == 201, below.text


def test_an_uploaded_source_is_inside_the_artifact_root(
    api: TestClient, allowed: Path, tmp_path: Path
) -> None:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(allowed / "src" / "train.py", arcname="train.py")
    uploaded = api.post("/v1/sources", content=buffer.getvalue())
    assert uploaded.status_code in (200, 201), uploaded.text
    source_uri = uploaded.json()["source_uri"]
    response = api.post("/v1/training-jobs", json=_spec(allowed, source_uri=source_uri))
    assert response.status_code == 201, response.text


def test_a_link_that_stays_inside_a_root_is_followed(api: TestClient, allowed: Path) -> None:
    (allowed / "code").symlink_to(allowed / "src")
    response = api.post(
        "/v1/training-jobs", json=_spec(allowed, source_uri=(allowed / "code").as_uri())
    )
    assert response.status_code == 201, response.text


def test_a_root_reached_through_a_link_is_the_same_root(
    tmp_path: Path, database_url: str, allowed: Path
) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(allowed)
    settings = make_settings(tmp_path / "home", database_url, file_roots=[alias])
    token = prepare(settings)
    with TestClient(create_app(settings)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        for source in (alias / "src", allowed / "src"):
            spec = job_spec(source, name=f"via-{source.parent.name}")
            response = client.post("/v1/training-jobs", params={"dry_run": "true"}, json=spec)
            assert response.status_code == 200, response.text


def test_a_nul_in_a_uri_is_refused(api: TestClient, allowed: Path) -> None:
    response = api.post(
        "/v1/training-jobs", json=_spec(allowed, inputs={"train": f"{allowed.as_uri()}/a%00b"})
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "inputs", "train", "uri"]


def test_roots_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RUNYARD_FILE_ROOTS", "/data:/srv/x/../y")
    assert Settings(home=tmp_path).file_roots == [
        Path("/data"),
        Path("/srv/y"),
        tmp_path / "artifacts",
    ]
    monkeypatch.setenv("RUNYARD_FILE_ROOTS", '["/a:b"]')
    assert Settings(home=tmp_path).file_roots[0] == Path("/a:b")
    monkeypatch.setenv("RUNYARD_FILE_ROOTS", "relative/dir")
    with pytest.raises(ValueError, match="absolute"):
        Settings(home=tmp_path)
    monkeypatch.delenv("RUNYARD_FILE_ROOTS")
    # With artifacts in S3, no file:// URI is a job's unless the administrator says so.
    assert Settings(home=tmp_path, artifact_root="s3://bucket/runyard").file_roots == []
    assert os.path.isabs(Settings(home=tmp_path).file_roots[0])
