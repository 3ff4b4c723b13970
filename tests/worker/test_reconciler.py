"""The reconciler on its own: real database, real local backend, no broker in the way."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from provisioning.base import Backend, LaunchRequest, Materialized
from provisioning.local.backend import LocalBackend, LocalPlan
from provisioning.local.stand_ins import ImageDecision
from service.jobs import lookup
from service.kit.db import session_scope, to_micros, utcnow
from service.logs import service as logs
from service.logs.schemas import Line
from service.metrics import extraction
from service.settings import Settings
from service.training import service
from tests.instances import SleepingInstances
from tests.jobs import SERVER_ADMIN, job_dir, job_id, job_state, report, submit
from worker.reconciler import Reconciler


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # No grace after a stop: these tests look at the decisions, not at scripts saving.
    return settings.model_copy(update={"stop_grace_seconds": 0.0, "teardown_grace_seconds": 0.5})


def test_a_launch_that_cannot_start_fails_the_job_with_the_reason(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir)

    def broken(_name: str, _settings: Settings) -> LocalBackend:
        return LocalBackend(settings.jobs_dir, python="/nonexistent/python3", teardown_grace=1)

    Reconciler(settings, broken).reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["secondary"]) == ("Failed", "Failed")
    assert job["reason"].startswith("InternalServerError: FileNotFoundError:")
    assert "/nonexistent/python3" in job["reason"]
    assert not job_dir(settings, name).exists()


def test_stop_before_launch_launches_nothing(settings: Settings, source_dir: Path) -> None:
    name = submit(settings, source_dir)
    with session_scope(settings.database_url) as session:
        service.stop(session, settings, name, SERVER_ADMIN)
    Reconciler(settings).reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["secondary"]) == ("Stopped", "Stopped")
    assert job["secondaries"] == ["Starting", "Stopping", "Stopped"]
    assert not job_dir(settings, name).exists()
    assert _log(settings, name) == [
        ("algo-1", 1, "Training job stopped at a user's request (runyard stop, or StopTrainingJob)")
    ]


def test_why_a_job_stopped_is_its_logs_last_line(settings: Settings, source_dir: Path) -> None:
    name = submit(settings, source_dir, instance_count=2)
    reconciler = Reconciler(settings, _sleepers(settings))
    reconciler.reconcile(job_id(settings, name))
    printed = [Line(seq, to_micros(utcnow()), "stdout", f"step {seq}") for seq in (1, 2, 3)]
    with session_scope(settings.database_url) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        logs.ingest(session, job.id, "algo-1", printed[:2])
        logs.ingest(session, job.id, "algo-2", printed)
        service.stop(session, settings, name, SERVER_ADMIN)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Stopped"
    *instances, last = _log(settings, name)
    assert len(instances) == 5
    # Numbered on from every line of the job, so that no line of its host can follow it.
    assert last == (
        "algo-1",
        4,
        "Training job stopped at a user's request (runyard stop, or StopTrainingJob)",
    )


class _StopDuringLaunch(LocalBackend):
    """A user's stop arrives while the instances are being launched."""

    def __init__(self, settings: Settings, name: str) -> None:
        super().__init__(settings.jobs_dir, teardown_grace=1)
        self.settings = settings
        self.job_name = name

    def start(self, materialized: Materialized[LocalPlan]) -> None:
        with session_scope(self.settings.database_url) as session:
            service.stop(session, self.settings, self.job_name, SERVER_ADMIN)
        super().start(materialized)


def test_a_stop_during_launch_is_not_overwritten(settings: Settings, source_dir: Path) -> None:
    name = submit(settings, source_dir, entry_point="train.py")
    backend = _StopDuringLaunch(settings, name)

    def build(_name: str, _settings: Settings) -> Backend[Any]:
        return backend

    Reconciler(settings, build).reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["secondary"]) == ("Stopped", "Stopped")
    assert job["secondaries"][-2:] == ["Stopping", "Stopped"]
    assert not job_dir(settings, name).exists()


def test_launch_request_carries_a_token_per_instance(settings: Settings, source_dir: Path) -> None:
    name = submit(settings, source_dir)
    seen: list[LaunchRequest] = []

    class Recording(LocalBackend):
        def launch_plan(
            self,
            request: LaunchRequest,
            image: ImageDecision | None = None,
            choosing: contextlib.ExitStack | None = None,
        ) -> Materialized[LocalPlan]:
            seen.append(request)
            return super().launch_plan(request, image, choosing)

    Reconciler(settings, lambda _n, _s: Recording(settings.jobs_dir, teardown_grace=1)).reconcile(
        job_id(settings, name)
    )
    from service.auth.tokens import instance_from_token

    # One token per instance, each good for that instance alone.
    assert {
        host: instance_from_token(settings.signing_key(), token)
        for host, token in seen[0].tokens.items()
    } == {host: (seen[0].job.id, host) for host in seen[0].hosts}
    with session_scope(settings.database_url) as session:
        service.stop(session, settings, name, SERVER_ADMIN)
    Reconciler(settings).reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Stopped"
    assert not job_dir(settings, name).exists()


def test_a_failed_jobs_transition_names_the_error_its_reason_shows_the_frames(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir)
    reconciler = Reconciler(settings, _sleepers(settings))
    reconciler.reconcile(job_id(settings, name))
    reason = (
        "AlgorithmError: ValueError: bad shape, exit code: 1\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/ml/code/train.py", line 3, in <module>\n'
        "    raise ValueError('bad shape')"
    )
    report(settings, name, "algo-1", "Failed", exit_code=1, failure_reason=reason)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["reason"]) == ("Failed", reason)
    assert job["transitions"][-1] == (
        "Failed",
        "Training job failed: AlgorithmError: ValueError: bad shape, exit code: 1",
    )


def _log(settings: Settings, name: str) -> list[tuple[str, int, str]]:
    with session_scope(settings.database_url) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        rows, _ = logs.page(session, job.id, host=None, cursor=None, limit=100)
        return [(row.host, row.seq, row.message) for row in rows]


def _sleepers(settings: Settings) -> Callable[[str, Settings], Backend[Any]]:
    return lambda _name, _settings: SleepingInstances(settings.jobs_dir)


def test_progress_follows_the_slowest_instance_and_never_goes_back(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, instance_count=2)
    reconciler = Reconciler(settings, _sleepers(settings))
    reconciler.reconcile(job_id(settings, name))  # launches
    report(settings, name, "algo-1", "Downloading")
    report(settings, name, "algo-1", "Training")
    reconciler.reconcile(
        job_id(settings, name)
    )  # algo-2 has said nothing yet: the job is not training
    assert job_state(settings, name)["secondary"] == "Downloading"
    report(settings, name, "algo-2", "Downloading")
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-2", "Training")
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-1", "Completed", exit_code=0, model_uri="file:///m/model.tar.gz")
    report(settings, name, "algo-2", "Completed", exit_code=0)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert job["secondaries"] == [
        "Starting",
        "LaunchingInstances",
        "Downloading",
        "Training",
        "Completed",
    ]
    assert not job_dir(settings, name).exists()  # the sleepers were torn down


def test_a_job_that_finished_in_time_is_not_stopped_for_max_run(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, max_run=1)
    reconciler = Reconciler(settings, _sleepers(settings))
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-1", "Completed", exit_code=0)
    time.sleep(1.2)  # the next pass comes after the deadline
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Completed"


def test_a_job_still_running_at_max_run_is_stopped(settings: Settings, source_dir: Path) -> None:
    name = submit(settings, source_dir, max_run=1)
    reconciler = Reconciler(settings, _sleepers(settings))
    reconciler.reconcile(job_id(settings, name))
    time.sleep(1.2)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["secondary"]) == ("Stopped", "MaxRuntimeExceeded")
    assert not job_dir(settings, name).exists()
    assert _log(settings, name) == [
        ("algo-1", 1, "Training job stopped: its max_run of 1 s was reached")
    ]


def _job_id(settings: Settings, name: str) -> str:
    with session_scope(settings.database_url) as session:
        return lookup.get(session, name, SERVER_ADMIN).id


def _complete_with_lines(
    settings: Settings,
    source_dir: Path,
    definitions: list[dict[str, str]],
    messages: list[str],
    budget: float | None = None,
) -> str:
    """A job that printed ``messages`` (stored, not searched) and completes; with
    ``budget``, an API process searched its lines with that budget before it ended."""
    name = submit(settings, source_dir, metric_definitions=definitions)
    reconciler = Reconciler(settings, _sleepers(settings))
    reconciler.reconcile(job_id(settings, name))
    now = to_micros(utcnow())
    printed = [Line(seq, now, "stdout", text) for seq, text in enumerate(messages, start=1)]
    with session_scope(settings.database_url) as session:
        logs.ingest(session, job_id(settings, name), "algo-1", printed)
    if budget is not None:
        extraction.extract_pending(settings.database_url, job_id(settings, name), "algo-1", budget)
    report(settings, name, "algo-1", "Completed", exit_code=0, model_uri="file:///m/model.tar.gz")
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Completed"
    return name


def test_lines_no_api_process_searched_give_their_metrics_before_the_job_ends(
    settings: Settings, source_dir: Path
) -> None:
    """As when the API process that stored a batch died before searching it."""
    loss = [{"name": "loss", "regex": r"loss=([0-9.]+)"}]
    name = _complete_with_lines(settings, source_dir, loss, ["loss=1", "loss=2", "loss=3"])
    with session_scope(settings.database_url, readonly=True) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        assert [(metric.name, metric.value) for metric in job.final_metrics] == [("loss", 3.0)]


def test_a_host_left_unsearched_says_so_in_the_jobs_last_lines(
    settings: Settings, source_dir: Path
) -> None:
    costly = [{"name": "m", "regex": r"[ab]*a[ab]{60}c(\d)"}]
    chooser = random.Random(2)
    noise = "".join(chooser.choice("ab") for _ in range(16_000))
    name = _complete_with_lines(settings, source_dir, costly, [noise] * 40, budget=0.02)
    host, _, last = _log(settings, name)[-1]
    assert host == "algo-1"
    assert last.startswith("Metrics were not searched for after line ")


def test_a_job_accepted_under_earlier_pattern_rules_still_ends(
    settings: Settings, source_dir: Path
) -> None:
    """A metric pattern refused today (its program is over the bound) in a job accepted
    before the bound: the job's stored spec is read as stored."""
    name = submit(settings, source_dir, metric_definitions=[{"name": "m", "regex": "m=(\\d)"}])
    with session_scope(settings.database_url) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        large = [{"name": "m", "regex": "(?:a{1,40}){1,25}m=(\\d)"}]
        job.spec = {**job.spec, "metric_definitions": large}
    reconciler = Reconciler(settings, _sleepers(settings))
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-1", "Completed", exit_code=0, model_uri="file:///m/model.tar.gz")
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Completed"
