"""DELETE /v1/training-jobs/{name}: an ended job's rows go, and its artifacts only when
asked, and then only those below its own folder."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.jobs.models import (
    JobFinalMetric,
    JobInstance,
    JobTransition,
    MetricPoint,
    TrainingJob,
)
from service.kit.db import session_scope
from service.logs.models import LogChunk
from service.settings import Settings
from tests.conftest import job_spec, log_line, submit_for_instances

JOB = "/v1/training-jobs/job-1"
ROWS = (TrainingJob, JobTransition, JobInstance, MetricPoint, JobFinalMetric, LogChunk)


def _rows(settings: Settings, job_id: str) -> dict[str, int]:
    with session_scope(settings.database_url, readonly=True) as session:
        return {
            model.__tablename__: session.scalar(
                select(func.count())
                .select_from(model)
                .where((model.id if model is TrainingJob else model.job_id) == job_id)
            )
            or 0
            for model in ROWS
        }


def _ended_job_with_history(
    api: TestClient, settings: Settings, source_dir: Path, **spec: object
) -> str:
    headers = submit_for_instances(
        api,
        settings,
        source_dir,
        metric_definitions=[{"name": "loss", "regex": r"loss: (\S+)"}],
        **spec,
    )
    report = {"phase": "Training", "time": "2026-01-01T00:00:00Z"}
    assert (
        api.post(f"{JOB}/instances/algo-1/status", json=report, headers=headers).status_code < 300
    )
    shipped = api.post(
        f"{JOB}/instances/algo-1/logs",
        json={"lines": [log_line(1, 0, "loss: 0.5"), log_line(2, 1, "loss: 0.25")]},
        headers=headers,
    )
    assert shipped.status_code == 200, shipped.text
    assert api.post(f"{JOB}/stop").json()["status"] == "Stopped"
    return str(api.get(JOB).json()["id"])


def test_deleting_an_ended_job_removes_its_rows_and_keeps_its_artifacts(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    job_id = _ended_job_with_history(api, settings, source_dir, output_path=out.as_uri())
    before = _rows(settings, job_id)
    assert all(before.values()), before  # every kind of row is there to be removed
    model = out / "job-1" / "output" / "model.tar.gz"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"weights")

    response = api.delete(JOB)
    assert response.status_code == 200, response.text
    assert response.json() == {"name": "job-1", "artifacts": "kept", "removed_objects": 0}
    assert set(_rows(settings, job_id).values()) == {0}
    assert api.get(JOB).status_code == 404
    assert model.read_bytes() == b"weights"
    # The name is free again.
    assert api.post("/v1/training-jobs", json=job_spec(source_dir)).status_code == 201


def test_removing_artifacts_touches_nothing_beside_the_jobs_own_folder(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    _ended_job_with_history(api, settings, source_dir, output_path=out.as_uri())
    own = out / "job-1"
    for relative in ("output/model.tar.gz", "output/data/metrics.json", "checkpoints/c1.pt"):
        (own / relative).parent.mkdir(parents=True, exist_ok=True)
        (own / relative).write_text(relative)
    outside = tmp_path / "precious.txt"
    outside.write_text("not the job's")
    (own / "link-to-precious").symlink_to(outside)
    # Beside it: another job whose name starts the same, a file named like the folder, and
    # the shared output path's own files.
    neighbours = [out / "job-10" / "output" / "model.tar.gz", out / "job-1.txt", out / "shared"]
    for path in neighbours:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("a neighbour's")

    response = api.delete(JOB, params={"artifacts": "remove"})
    assert response.status_code == 200, response.text
    assert response.json() == {"name": "job-1", "artifacts": "removed", "removed_objects": 4}
    assert not own.exists()
    assert outside.read_text() == "not the job's"
    assert [path.read_text() for path in neighbours] == ["a neighbour's"] * 3


def test_a_job_still_running_is_not_deleted(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    submit_for_instances(api, settings, source_dir)
    response = api.delete(JOB)
    assert response.status_code == 409
    assert "runyard stop job-1" in response.json()["detail"]
    assert api.get(JOB).status_code == 200


def test_the_artifacts_choice_is_checked_and_viewers_may_not_delete(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    _ended_job_with_history(api, settings, source_dir)
    bad = api.delete(JOB, params={"artifacts": "shred"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "artifacts"]
    minted = api.post("/v1/tokens", json={"name": "vera", "role": "viewer"})
    assert minted.status_code == 201, minted.text
    viewer = {"Authorization": f"Bearer {minted.json()['token']}"}
    refused = api.delete(JOB, headers=viewer)
    assert refused.status_code == 403
    assert api.get(JOB).status_code == 200
    assert api.delete("/v1/training-jobs/no-such-job").status_code == 404
