"""Capacity and quotas: jobs queue in priority then submission order, all of a job's
instances are admitted together, and what can never fit is refused at submission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract.phases import Phase
from contract.protocol import StatusReport
from provisioning.base import Backend
from service.app import create_app
from service.auth.models import Project
from service.auth.service import create_project, create_token
from service.capacity import service as capacity
from service.jobs.schemas import JobCreate
from service.kit.db import session_scope, utcnow
from service.settings import Settings
from service.training import service
from tests.conftest import grant, job_spec
from tests.instances import SleepingInstances
from tests.jobs import SERVER_ADMIN, job_id, named
from worker.reconciler import Reconciler


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "capacity": {"local": 3},
            "project_quotas": {"team-a": {"local": 1}},
            "stop_grace_seconds": 0.0,
            "teardown_grace_seconds": 0.5,
        }
    )


def _reconciler(settings: Settings) -> Reconciler:
    backend = SleepingInstances(settings.jobs_dir)

    def build(_name: str, _settings: Settings) -> Backend[Any]:
        return backend

    return Reconciler(settings, build)


def _submit(
    settings: Settings, source_dir: Path, name: str, project: str = "default", **spec: Any
) -> str:
    if project != "default":
        grant(settings, project, source_dir.as_uri())
    with session_scope(settings.database_url) as session:
        job = JobCreate.model_validate(job_spec(source_dir, name=name, **spec))
        return service.submit(session, settings, job, project).name


def _state(settings: Settings, name: str) -> tuple[str, bool, str | None]:
    with session_scope(settings.database_url) as session:
        job = named(session, name)
        return job.secondary_status, job.admitted_at is not None, job.pending_reason


def _complete(settings: Settings, name: str, count: int) -> None:
    with session_scope(settings.database_url) as session:
        job = named(session, name)
        for index in range(1, count + 1):
            report = StatusReport(phase=Phase.COMPLETED, time=utcnow(), exit_code=0)
            service.record_report(session, settings, job, f"algo-{index}", report)


def _drive(reconciler: Reconciler, *names: str) -> None:
    for name in names:
        reconciler.reconcile(job_id(reconciler.settings, name))


def test_a_job_over_capacity_waits_in_line_and_starts_when_instances_free(
    settings: Settings, source_dir: Path
) -> None:
    reconciler = _reconciler(settings)
    big = _submit(settings, source_dir, "big", instance_count=2)
    second = _submit(settings, source_dir, "second", instance_count=2)
    small = _submit(settings, source_dir, "small", instance_count=1)
    _drive(reconciler, big, second, small)
    assert _state(settings, big)[:2] == ("LaunchingInstances", True)
    secondary, admitted, reason = _state(settings, second)
    assert (secondary, admitted) == ("Pending", False)
    assert reason == ("Waiting for capacity: 2 of 3 local instances are in use and the job needs 2")
    # One instance is free, but `small` may not jump the line ahead of `second`: a stream
    # of small jobs would otherwise starve it.
    secondary, admitted, reason = _state(settings, small)
    assert (secondary, admitted) == ("Pending", False)
    assert reason == "Waiting in line for local capacity behind second (2 instances, priority 0)"
    _complete(settings, big, 2)
    _drive(reconciler, big, second, small)
    assert _state(settings, big)[0] == "Completed"
    assert _state(settings, second)[:2] == ("LaunchingInstances", True)
    assert _state(settings, small)[:2] == ("LaunchingInstances", True)
    _complete(settings, second, 2)
    _complete(settings, small, 1)
    _drive(reconciler, second, small)


def test_higher_priority_goes_first(settings: Settings, source_dir: Path) -> None:
    reconciler = _reconciler(settings)
    holder = _submit(settings, source_dir, "holder", instance_count=3)
    _drive(reconciler, holder)
    early = _submit(settings, source_dir, "early", instance_count=2)
    urgent = _submit(settings, source_dir, "urgent", instance_count=2, priority=10)
    _drive(reconciler, early, urgent)
    assert not _state(settings, early)[1]
    assert not _state(settings, urgent)[1]
    _complete(settings, holder, 3)
    _drive(reconciler, holder, early, urgent)
    assert _state(settings, urgent)[:2] == ("LaunchingInstances", True)
    assert _state(settings, early)[2] == (
        "Waiting for capacity: 2 of 3 local instances are in use and the job needs 2"
    )
    _complete(settings, urgent, 2)
    _drive(reconciler, urgent, early)
    assert _state(settings, early)[1]
    _complete(settings, early, 2)
    _drive(reconciler, early)


def test_a_project_at_its_quota_waits_without_holding_up_others(
    settings: Settings, source_dir: Path
) -> None:
    reconciler = _reconciler(settings)
    first = _submit(settings, source_dir, "a-first", project="team-a")
    second = _submit(settings, source_dir, "a-second", project="team-a")
    other = _submit(settings, source_dir, "other", project="team-b")
    _drive(reconciler, first, second, other)
    assert _state(settings, first)[1]
    assert _state(settings, second)[1:] == (
        False,
        "Waiting for project 'team-a''s quota: its jobs hold 1 of 1 local instances and this "
        "one needs 1",
    )
    assert _state(settings, other)[1]  # passes the job held back by its own project's quota
    for name in (first, other):
        _complete(settings, name, 1)
    _drive(reconciler, first, other, second)
    assert _state(settings, second)[1]
    _complete(settings, second, 1)
    _drive(reconciler, second)


def test_the_line_is_read_on_past_jobs_that_may_be_passed(
    settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The line is read a page at a time, in its order; a page of two, so the job that
    # decides is on the fourth.
    monkeypatch.setattr(capacity, "_LINE_PAGE", 2)
    reconciler = _reconciler(settings)
    holder = _submit(settings, source_dir, "a-holder", project="team-a")
    _drive(reconciler, holder)
    # Held back by their own project's quota: a job of another project may pass them.
    passable = [_submit(settings, source_dir, f"a-{n}", project="team-a") for n in range(6)]
    big = _submit(settings, source_dir, "big", project="team-b", instance_count=3)
    _drive(reconciler, *passable, big)
    late = _submit(settings, source_dir, "late", project="team-b")
    _drive(reconciler, late)
    assert _state(settings, late)[1:] == (
        False,
        "Waiting in line for local capacity behind big (3 instances, priority 0)",
    )


def test_stopping_a_queued_job_ends_it_without_instances(
    settings: Settings, source_dir: Path
) -> None:
    reconciler = _reconciler(settings)
    holder = _submit(settings, source_dir, "holder", instance_count=3)
    queued = _submit(settings, source_dir, "queued")
    _drive(reconciler, holder, queued)
    with session_scope(settings.database_url) as session:
        service.stop(session, settings, queued, SERVER_ADMIN, named(session, queued).project)
    _drive(reconciler, queued)
    assert _state(settings, queued)[:2] == ("Stopped", False)
    _complete(settings, holder, 3)
    _drive(reconciler, holder)


def _api(settings: Settings, project: str, source_dir: Path) -> TestClient:
    if project != "default":
        grant(settings, project, source_dir.as_uri())  # made with its grant
    with session_scope(settings.database_url) as session:
        if session.get(Project, project) is None:
            create_project(session, project)
        token = create_token(session, "someone", project=project)
    client = TestClient(create_app(settings))
    client.headers["Authorization"] = f"Bearer {token}"
    return client


def test_a_job_that_can_never_fit_is_refused_at_submission(
    settings: Settings, source_dir: Path
) -> None:
    with _api(settings, "team-a", source_dir) as client:
        too_big = client.post("/v1/training-jobs", json=job_spec(source_dir, instance_count=4))
        over_quota = client.post("/v1/training-jobs", json=job_spec(source_dir, instance_count=2))
        listed = client.get("/v1/training-jobs").json()["items"]
    assert too_big.status_code == 422
    assert too_big.json()["detail"] == [
        {
            "loc": ["body", "instance_count"],
            "msg": "can never start: 4 local instances asked for; this server has 3",
            "type": "value_error",
        }
    ]
    assert over_quota.status_code == 422
    assert over_quota.json()["detail"][0]["msg"] == (
        "can never start: 2 local instances asked for; project 'team-a' may hold 1"
    )
    assert listed == []


def test_refuse_mode_answers_resource_limit_exceeded(settings: Settings, source_dir: Path) -> None:
    settings = settings.model_copy(update={"on_capacity_exceeded": "refuse"})
    reconciler = _reconciler(settings)
    with _api(settings, "team-b", source_dir) as client:
        first = client.post("/v1/training-jobs", json=job_spec(source_dir, instance_count=2))
        assert first.status_code == 201
        reconciler.reconcile(first.json()["id"])
        refused = client.post(
            "/v1/training-jobs", json=job_spec(source_dir, name="refused", instance_count=2)
        )
        assert refused.status_code == 400
        assert refused.json()["detail"] == (
            "ResourceLimitExceeded: Waiting for capacity: 2 of 3 local instances are in use "
            "and the job needs 2"
        )
        assert client.get("/v1/training-jobs/refused").status_code == 404
        assert (
            client.post(
                "/v1/training-jobs", json=job_spec(source_dir, name="fits", instance_count=1)
            ).status_code
            == 201
        )
    with session_scope(settings.database_url) as session:
        for name in (first.json()["name"], "fits"):
            service.stop(session, settings, name, SERVER_ADMIN, named(session, name).project)
    _drive(reconciler, first.json()["name"], "fits")


def test_refuse_mode_counts_jobs_accepted_but_not_yet_admitted(
    settings: Settings, source_dir: Path
) -> None:
    settings = settings.model_copy(update={"on_capacity_exceeded": "refuse"})
    reconciler = _reconciler(settings)
    with _api(settings, "team-b", source_dir) as client:
        # No pass has run between the two: the first holds no instances yet, but will.
        first = client.post("/v1/training-jobs", json=job_spec(source_dir, instance_count=2))
        second = client.post(
            "/v1/training-jobs", json=job_spec(source_dir, name="second", instance_count=2)
        )
    assert first.status_code == 201
    assert second.status_code == 400
    assert second.json()["detail"].startswith("ResourceLimitExceeded: Waiting for capacity")
    with session_scope(settings.database_url) as session:
        service.stop(
            session,
            settings,
            first.json()["name"],
            SERVER_ADMIN,
            named(session, first.json()["name"]).project,
        )
    _drive(reconciler, first.json()["name"])


def test_a_projects_small_job_does_not_pass_its_own_larger_one(
    settings: Settings, source_dir: Path
) -> None:
    settings = settings.model_copy(update={"project_quotas": {"team-a": {"local": 2}}})
    reconciler = _reconciler(settings)
    holder = _submit(settings, source_dir, "a-holder", project="team-a")
    large = _submit(settings, source_dir, "a-large", project="team-a", instance_count=2)
    small = _submit(settings, source_dir, "a-small", project="team-a")
    _drive(reconciler, holder, large, small)
    assert _state(settings, large)[1] is False
    assert _state(settings, small)[1:] == (
        False,
        "Waiting in line for project 'team-a''s quota behind a-large (2 instances, priority 0)",
    )
    _complete(settings, holder, 1)
    _drive(reconciler, holder, small, large)
    assert _state(settings, small)[1] is False
    assert _state(settings, large)[1]
    _complete(settings, large, 2)
    _drive(reconciler, large, small)
    assert _state(settings, small)[1]
    _complete(settings, small, 1)
    _drive(reconciler, small)


def test_the_capacity_route_shows_the_line_and_hides_other_projects_jobs(
    settings: Settings, source_dir: Path
) -> None:
    reconciler = _reconciler(settings)
    with session_scope(settings.database_url) as session:
        create_project(session, "team-b")
    big = _submit(settings, source_dir, "big", instance_count=2)
    theirs = _submit(settings, source_dir, "theirs", project="team-b", instance_count=2)
    small = _submit(settings, source_dir, "small", instance_count=1, priority=5)
    _drive(reconciler, big, theirs, small)
    with _api(settings, "default", source_dir) as client:
        seen = client.get("/v1/capacity")
    assert seen.status_code == 200, seen.text
    [local] = seen.json()["types"]
    assert (local["instance_type"], local["capacity"], local["in_use"]) == ("local", 3, 3)
    assert [(h["name"], h["instance_count"], h["reason"]) for h in local["running"]] == [
        ("small", 1, None),  # priority 5 went first
        ("big", 2, None),
    ]
    [waiting] = local["waiting"]
    # team-b's job keeps its place, but neither its name nor its reason shows.
    assert waiting == {
        "name": None,
        "project": None,
        "instance_count": 2,
        "priority": 0,
        "reason": "Waiting",
    }
    with _api(settings, "team-b", source_dir) as client:
        [local] = client.get("/v1/capacity").json()["types"]
    assert [h["name"] for h in local["running"]] == [None, None]
    assert local["waiting"][0]["name"] == "theirs"
    # Decided when big held 2 of the 3 (small, first in line, was not admitted yet).
    assert local["waiting"][0]["reason"].startswith("Waiting for capacity: 2 of 3")
    with session_scope(settings.database_url) as session:
        for name in (big, theirs, small):
            service.stop(session, settings, name, SERVER_ADMIN, named(session, name).project)
    _drive(reconciler, big, theirs, small)


def test_a_long_line_shows_its_front_and_each_job_its_place(
    settings: Settings, source_dir: Path
) -> None:
    reconciler = _reconciler(settings)
    holder = _submit(settings, source_dir, "holder", instance_count=3)
    _drive(reconciler, holder)
    waiting = [_submit(settings, source_dir, f"w-{n}") for n in range(5)]
    urgent = _submit(settings, source_dir, "urgent", priority=3)
    theirs = _submit(settings, source_dir, "theirs", project="team-b")
    with _api(settings, "default", source_dir) as client:
        [local] = client.get("/v1/capacity", params={"waiting_limit": 2}).json()["types"]
        assert [held["name"] for held in local["waiting"]] == ["urgent", waiting[0]]
        assert local["waiting_count"] == 7
        places = {
            name: client.get(f"/v1/training-jobs/{name}/place-in-line").json()
            for name in (holder, urgent, *waiting)
        }
        assert client.get(f"/v1/training-jobs/{theirs}/place-in-line").status_code == 404
        assert client.get("/v1/capacity", params={"waiting_limit": 1001}).status_code == 422
    assert places[holder] == {"instance_type": "local", "place": None, "waiting_count": 7}
    assert [places[name]["place"] for name in (urgent, *waiting)] == [1, 2, 3, 4, 5, 6]
    with session_scope(settings.database_url) as session:
        for name in (holder, urgent, theirs, *waiting):
            service.stop(session, settings, name, SERVER_ADMIN, named(session, name).project)
