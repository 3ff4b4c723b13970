"""Source retention: uploaded code no job refers to is deleted once it is old enough; code
a job refers to, code uploaded again lately, and a job's own output are kept."""

from __future__ import annotations

import os
import shutil
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
from celery.exceptions import DuplicateTaskNameWarning
from fastapi.testclient import TestClient
from pydantic import ValidationError

from contract import storage
from contract.archive import make_tarball
from service.kit.db import session_scope, utcnow
from service.settings import Settings
from service.sources.retention import prune_unreferenced
from tests.conftest import job_spec
from worker.celery_app import create_celery

GZIP = {"Content-Type": "application/gzip"}
DAY = timedelta(days=1)


def _upload(api: TestClient, source_dir: Path, content: str, tmp_path: Path) -> Path:
    (source_dir / "train.py").write_text(content)
    bundle = make_tarball(source_dir, tmp_path / "code.tar.gz").read_bytes()
    response = api.post("/v1/sources", content=bundle, headers=GZIP)
    assert response.status_code == 201, response.text
    return storage.local_path(response.json()["source_uri"])


def _age(path: Path, days: float) -> None:
    when = (utcnow() - days * DAY).timestamp()
    os.utime(path, (when, when))


def _prune(settings: Settings) -> list[Path]:
    with session_scope(settings.database_url, readonly=True) as session:
        return [storage.local_path(uri) for uri in prune_unreferenced(session, settings)]


def test_old_code_no_job_refers_to_is_deleted(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    used = _upload(api, source_dir, "print('used')\n", tmp_path)
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, source_uri=used.as_uri()))
    assert response.status_code == 201, response.text
    unused = _upload(api, source_dir, "print('unused')\n", tmp_path)
    recent = _upload(api, source_dir, "print('recent')\n", tmp_path)
    again = _upload(api, source_dir, "print('again')\n", tmp_path)
    root = storage.local_path(settings.artifact_root)
    # Stored by an earlier version under sources/, where a job named "sources" also
    # writes its model.
    legacy = root / "sources" / f"{'a' * 64}.tar.gz"
    model = root / "sources" / "output" / "model.tar.gz"
    model.parent.mkdir(parents=True)
    shutil.copyfile(unused, legacy)
    shutil.copyfile(unused, model)
    for path in (used, unused, again, legacy, model):
        _age(path, 8)
    _age(recent, 6)
    # Uploaded again just now (by a client about to submit a job with it).
    assert _upload(api, source_dir, "print('again')\n", tmp_path) == again

    assert sorted(_prune(settings)) == sorted([unused, legacy])
    for kept in (used, recent, again, model):
        assert kept.exists(), kept
    assert _prune(settings) == []


def test_zero_days_keeps_everything(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    unused = _upload(api, source_dir, "print('unused')\n", tmp_path)
    _age(unused, 3650)
    assert _prune(settings.model_copy(update={"source_retention_days": 0})) == []
    assert unused.exists()


def test_retention_days_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(home=tmp_path).source_retention_days == 7
    monkeypatch.setenv("RUNYARD_SOURCE_RETENTION_DAYS", "0")
    assert Settings(home=tmp_path).source_retention_days == 0
    monkeypatch.setenv("RUNYARD_SOURCE_RETENTION_DAYS", "-1")
    with pytest.raises(ValidationError, match="source_retention_days"):
        Settings(home=tmp_path)


def test_beat_runs_the_pruning_task_hourly(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    app = create_celery(settings.model_copy(update={"source_retention_days": 2}))
    entry = app.conf.beat_schedule["prune-sources"]
    assert entry["task"] == "runyard.prune_sources"
    assert entry["schedule"] == 3600.0

    old = _upload(api, source_dir, "print('old')\n", tmp_path)
    young = _upload(api, source_dir, "print('young')\n", tmp_path)
    _age(old, 3)
    _age(young, 1)
    with warnings.catch_warnings():
        # As in the log retention test: other apps' shared tasks are registered again.
        warnings.simplefilter("ignore", DuplicateTaskNameWarning)
        task = app.tasks["runyard.prune_sources"]
    task()
    assert not old.exists()
    assert young.exists()
