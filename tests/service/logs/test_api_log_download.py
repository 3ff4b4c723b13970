"""A job's log as a text file: every host's lines merged by time, or one host's, streamed
a page at a time."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from service.logs import service as logs_service
from service.settings import Settings
from tests.conftest import log_line, submit_for_instances


def _two_hosts(api: TestClient, settings: Settings, source_dir: Path) -> str:
    headers = submit_for_instances(api, settings, source_dir, instance_count=2)
    base = "/v1/training-jobs/job-1/instances"
    api.post(
        f"{base}/algo-2/logs",
        json={"lines": [log_line(1, 1, "b1"), log_line(2, 3, "b2 <script>")]},
        headers=headers.of("algo-2"),
    )
    api.post(
        f"{base}/algo-1/logs",
        json={"lines": [log_line(1, 0, "a1"), log_line(2, 2, "a2", "stderr")]},
        headers=headers,
    )
    return str(api.get("/v1/training-jobs/job-1").json()["id"])


def test_the_whole_log_and_one_hosts_download_as_text(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    job_id = _two_hosts(api, settings, source_dir)
    whole = api.get("/v1/training-jobs/job-1/logs/download")
    assert whole.status_code == 200, whole.text
    assert whole.headers["content-type"] == "text/plain; charset=utf-8"
    assert whole.headers["content-disposition"] == 'attachment; filename="job-1.log"'
    assert whole.text.splitlines() == [
        "2026-01-01T00:00:00Z algo-1 a1",
        "2026-01-01T00:00:01Z algo-2 b1",
        "2026-01-01T00:00:02Z algo-1 a2",
        "2026-01-01T00:00:03Z algo-2 b2 <script>",
    ]
    one = api.get("/v1/training-jobs/job-1/logs/download", params={"host": "algo-2"})
    assert one.headers["content-disposition"] == 'attachment; filename="job-1-algo-2.log"'
    assert one.text == "2026-01-01T00:00:01Z algo-2 b1\n2026-01-01T00:00:03Z algo-2 b2 <script>\n"

    # Pages smaller than the log: each line once, in order, whatever the page size.
    for size in (1, 3, 4):
        paged = b"".join(logs_service.as_text(settings, job_id, None, page_size=size))
        assert paged.decode() == whole.text


def test_a_log_download_refuses_a_host_the_job_lacks_and_a_job_not_there(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    _two_hosts(api, settings, source_dir)
    missing = api.get("/v1/training-jobs/job-1/logs/download", params={"host": "algo-3"})
    assert missing.status_code == 404
    assert "no host 'algo-3'" in missing.json()["detail"]
    assert api.get("/v1/training-jobs/nope/logs/download").status_code == 404
    bad = api.get("/v1/training-jobs/job-1/logs/download", params={"host": "a\x00"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "host"]


def test_an_empty_log_downloads_as_an_empty_file(api: TestClient, source_dir: Path) -> None:
    from tests.conftest import job_spec

    api.post("/v1/training-jobs", json=job_spec(source_dir))
    empty = api.get("/v1/training-jobs/job-1/logs/download")
    assert (empty.status_code, empty.text) == (200, "")
