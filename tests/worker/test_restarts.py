"""Restarts, spot interruptions and max_wait, decided by the reconciler: real database,
real local instances (processes that only sleep; the test plays their runtimes' part)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contract.failure_causes import FailureCause
from contract.protocol import InterruptionNotice
from provisioning.base import Backend, InstanceState, InstanceStatus
from service.jobs import billing, lookup
from service.kit.db import session_scope, to_micros, utcnow
from service.kit.errors import Conflict
from service.logs import service as logs
from service.logs.schemas import Line
from service.settings import Settings
from service.training import service
from tests.instances import SleepingInstances
from tests.jobs import SERVER_ADMIN, job_dir, job_id, job_state, report, submit
from tests.wheels import make_wheel, offline
from worker.reconciler import Reconciler


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "stop_grace_seconds": 0.0,
            "teardown_grace_seconds": 0.5,
            "restart_backoff_seconds": 0.0,
            "spot_grace_seconds": 5.0,
        }
    )


def _backend(
    settings: Settings,
) -> tuple[SleepingInstances, Callable[[str, Settings], Backend[Any]]]:
    backend = SleepingInstances(settings.jobs_dir)
    return backend, lambda _name, _settings: backend


def _notice(message: str, attempt: int | None = None) -> InterruptionNotice:
    return InterruptionNotice(message=message, attempt=attempt)


def _interrupt(settings: Settings, name: str, attempt: int | None = None) -> None:
    with session_scope(settings.database_url) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        service.notice_interruption(session, settings, job, "algo-1", _notice("gone", attempt))


def _kill(settings: Settings, name: str, host: str) -> None:
    """The instance's machine dies: its process group goes, with no word from its runtime."""
    pid = json.loads((job_dir(settings, name) / f"{host}.pid.json").read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)
    _wait_for(lambda: not _alive(pid))


def _fail(settings: Settings, name: str, exit_code: int, attempt: int) -> None:
    report(
        settings,
        name,
        "algo-1",
        "Failed",
        exit_code=exit_code,
        failure_reason=f"AlgorithmError: exit {exit_code}",
        attempt=attempt,
    )


def test_a_retryable_exit_code_is_retried_up_to_the_limit(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(
        settings,
        source_dir,
        max_retry_attempts=2,
        retry_rules=[{"on_exit_codes": [75], "action": "retry"}],
    )
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    for attempt in (0, 1):
        _fail(settings, name, 75, attempt)
        reconciler.reconcile(
            job_id(settings, name)
        )  # decides, tears down and launches the next attempt
        job = job_state(settings, name)
        assert (job["status"], job["attempt"], job["restarts"]) == (
            "InProgress",
            attempt + 1,
            attempt + 1,
        )
        assert job["instances"] == {}  # the new attempt's instances report afresh
    _fail(settings, name, 75, 2)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert job["status"] == "Failed"
    assert (
        job["reason"] == "AlgorithmError: exit 75 (no retries left: 2 of max_retry_attempts used)"
    )
    assert backend.launches == [0, 1, 2]
    restarting = [message for secondary, message in job["transitions"] if secondary == "Restarting"]
    assert restarting == [
        "Restarting (retry 1 of 2) after: AlgorithmError: exit 75",
        "Restarting (retry 2 of 2) after: AlgorithmError: exit 75",
    ]
    assert job["infrastructure_restarts"] == 0
    assert not job_dir(settings, name).exists()


def test_a_restart_runs_on_the_image_the_first_launch_decided(
    settings: Settings, source_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first launch finds no build of torch 1.12.1 for this Python on the package
    index (pip is asked, for real) and runs the job on a stand-in; by the restart the
    index has one. The restart runs on the stand-in all the same, as the job's describe
    has said since its first launch."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "torch", "1.13.1", "__version__ = '1.13.1'\n")
    for variable, value in offline(wheels).items():
        monkeypatch.setenv(variable, value)  # the server's pip: these wheels alone
    monkeypatch.setenv("PIP_CONSTRAINT", "/dev/null")  # not the machine's own, if it has one
    name = submit(
        settings,
        source_dir,
        framework_version="1.12",
        max_retry_attempts=1,
        retry_rules=[{"on_exit_codes": [75], "action": "retry"}],
    )
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    with session_scope(settings.database_url) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        named, launched, note = job.record.image.name, job.launched_image, job.launched_image_note
    assert launched is not None
    assert launched != named
    assert note is not None
    assert note.startswith("torch==1.12.1 cannot be installed for Python ")
    make_wheel(wheels, "torch", "1.12.1", "__version__ = '1.12.1'\n")
    backend.images.index.forget()
    _fail(settings, name, 75, 0)
    reconciler.reconcile(job_id(settings, name))
    assert (job_state(settings, name)["attempt"], backend.launches) == (1, [0, 1])
    assert backend.ran_on == [launched, launched]
    with session_scope(settings.database_url) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        assert (job.launched_image, job.launched_image_note) == (launched, note)
    # Asked now, pip would have had the job run on the image it names.
    python = settings.catalog.python
    assert backend.images.index.offers("torch==1.12.1", python, sys.executable).offered is True
    with session_scope(settings.database_url) as session:
        service.stop(session, settings, name, SERVER_ADMIN)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Stopped"


def test_an_exit_code_no_rule_retries_fails_at_once(settings: Settings, source_dir: Path) -> None:
    name = submit(
        settings,
        source_dir,
        max_retry_attempts=3,
        retry_rules=[{"on_exit_codes": [75], "action": "retry"}],
    )
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    _fail(settings, name, 1, 0)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["reason"], job["restarts"]) == (
        "Failed",
        "AlgorithmError: exit 1",
        0,
    )
    assert backend.launches == [0]
    assert "Restarting" not in job["secondaries"]


def test_a_lost_instance_restarts_the_job_as_an_infrastructure_failure(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, instance_count=2)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-1", "Training", attempt=0)
    _kill(settings, name, "algo-2")
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["attempt"]) == ("InProgress", 1)
    assert (job["restarts"], job["infrastructure_restarts"]) == (0, 1)
    [message] = [m for s, m in job["transitions"] if s == "Restarting"]
    assert message.startswith(
        "Restarting after an infrastructure failure (1 of 3): InstanceLost: algo-2 ended"
    )
    assert backend.launches == [0, 1]
    assert job["billable_seconds"] is not None  # the first attempt's time is billed
    # A late word from the first attempt changes nothing of the second.
    report(settings, name, "algo-1", "Failed", exit_code=1, failure_reason="late", attempt=0)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "InProgress"
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=1)
    report(settings, name, "algo-2", "Completed", exit_code=0, attempt=1)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Completed"


def test_an_mpi_job_whose_worker_instance_died_is_not_completed_by_mpirun_saying_so(
    settings: Settings, source_dir: Path
) -> None:
    # Open MPI's prterun can exit 0 after losing a daemon: algo-1 then reports Completed
    # although algo-2's ranks died with their instance mid-training.
    mpi = {"mpi": {"enabled": True, "processes_per_host": 1}}
    name = submit(settings, source_dir, instance_count=2, distribution=mpi)
    _, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    _kill(settings, name, "algo-2")
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=0)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["attempt"], job["infrastructure_restarts"]) == ("InProgress", 1, 1)
    [message] = [m for s, m in job["transitions"] if s == "Restarting"]
    assert "InstanceLost: algo-2 ended without reporting a result" in message
    # Its daemon's instance still running or done with a word: algo-1's result stands.
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=1)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Completed"


def test_infrastructure_restarts_have_their_own_limit(settings: Settings, source_dir: Path) -> None:
    settings = settings.model_copy(update={"max_infrastructure_restarts": 1})
    name = submit(settings, source_dir)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    for _ in range(2):
        _kill(settings, name, "algo-1")
        reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert job["status"] == "Failed"
    assert job["reason"].startswith("InstanceLost: algo-1 ended without reporting a result")
    assert job["reason"].endswith(
        "(not restarted: the job was already restarted 1 times after infrastructure failures)"
    )
    assert backend.launches == [0, 1]


def test_a_rule_can_refuse_to_restart_an_infrastructure_failure(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(
        settings,
        source_dir,
        retry_rules=[{"on_failure_reasons": ["^InstanceLost"], "action": "fail"}],
    )
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    _kill(settings, name, "algo-1")
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Failed"
    assert backend.launches == [0]


def test_a_retry_waits_out_its_back_off(settings: Settings, source_dir: Path) -> None:
    settings = settings.model_copy(update={"restart_backoff_seconds": 30.0})
    name = submit(settings, source_dir, max_retry_attempts=1)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    _fail(settings, name, 3, 0)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["secondary"], job["attempt"]) == ("Restarting", 0)
    assert job["pending_reason"].startswith("Restarting in ")
    assert "(back-off after a failed attempt)" in job["pending_reason"]
    assert not job_dir(settings, name).exists()  # torn down while it waits
    reconciler.reconcile(job_id(settings, name))  # still waiting: nothing launched
    assert backend.launches == [0]
    with session_scope(settings.database_url) as session:
        service.stop(session, settings, name, SERVER_ADMIN)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Stopped"


def test_a_spot_interruption_gives_a_grace_then_resumes_on_new_capacity(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, use_spot_instances=True, max_run=600, max_wait=3600)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    leader = json.loads((job_dir(settings, name) / "algo-1.pid.json").read_text())["pid"]
    with session_scope(settings.database_url) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        service.notice_interruption(session, settings, job, "algo-1", _notice("capacity reclaimed"))
    reconciler.reconcile(job_id(settings, name))  # SIGTERM to the instance; the sleeper ends on it
    _wait_for(lambda: not _alive(leader))
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["attempt"], job["infrastructure_restarts"]) == ("InProgress", 1, 1)
    assert backend.launches == [0, 1]
    [notice] = [m for s, m in job["transitions"] if s == "Interrupted"]
    assert notice == (
        "Spot interruption: algo-1: capacity reclaimed; the scripts got SIGTERM and 5 s "
        "to save a checkpoint"
    )
    assert job["secondaries"][-2:] == ["Interrupted", "LaunchingInstances"]
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=1)
    reconciler.reconcile(job_id(settings, name))
    with session_scope(settings.database_url) as session:
        done = lookup.get(session, name, SERVER_ADMIN)
        assert done.status == "Completed"
        # The interrupted attempt's instance never reported: it never started, and is
        # not billed; the savings are the SDK's figure from what is billed.
        assert done.training_start_time is not None
        assert done.training_end_time is not None
        training = billing.training_seconds(done.training_start_time, done.training_end_time)
        assert done.billable_seconds is not None
        assert done.billable_seconds <= training
        assert done.spot_savings_percent == billing.spot_savings_percent(
            done.billable_seconds, training
        )


def test_only_a_spot_job_with_running_instances_takes_a_notice(
    settings: Settings, source_dir: Path
) -> None:
    on_demand = submit(settings, source_dir, name="on-demand")
    spot = submit(
        settings, source_dir, name="spot", use_spot_instances=True, max_run=60, max_wait=60
    )
    with session_scope(settings.database_url) as session:
        with pytest.raises(Conflict, match="does not run on spot instances"):
            service.notice_interruption(
                session,
                settings,
                lookup.get(session, on_demand, SERVER_ADMIN),
                "algo-1",
                _notice("x"),
            )
        with pytest.raises(Conflict, match="has no running instances"):
            service.notice_interruption(
                session, settings, lookup.get(session, spot, SERVER_ADMIN), "algo-1", _notice("x")
            )


def test_a_spot_job_past_max_wait_is_stopped(settings: Settings, source_dir: Path) -> None:
    name = submit(settings, source_dir, use_spot_instances=True, max_run=1, max_wait=1)
    _, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    time.sleep(1.2)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["secondary"]) == ("Stopped", "MaxWaitTimeExceeded")
    stopping = next(m for s, m in job["transitions"] if s == "MaxWaitTimeExceeded")
    assert "longer than max_wait (1 s)" in stopping
    assert not job_dir(settings, name).exists()


def test_spot_interruptions_leave_the_budget_for_lost_instances(
    settings: Settings, source_dir: Path
) -> None:
    settings = settings.model_copy(
        update={"max_infrastructure_restarts": 1, "spot_grace_seconds": 0.0}
    )
    name = submit(settings, source_dir, use_spot_instances=True, max_run=600, max_wait=3600)
    _, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    _interrupt(settings, name)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["attempt"] == 1
    _kill(settings, name, "algo-1")
    reconciler.reconcile(job_id(settings, name))  # the one lost-instance restart allowed
    job = job_state(settings, name)
    assert (job["status"], job["attempt"]) == ("InProgress", 2)
    assert (job["infrastructure_restarts"], job["interruptions"]) == (2, 1)
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=2)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Completed"


def test_a_notice_from_an_earlier_attempts_instance_is_ignored(
    settings: Settings, source_dir: Path
) -> None:
    settings = settings.model_copy(update={"spot_grace_seconds": 0.0})
    name = submit(settings, source_dir, use_spot_instances=True, max_run=600, max_wait=3600)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    _interrupt(settings, name, attempt=0)
    reconciler.reconcile(job_id(settings, name))
    _interrupt(settings, name, attempt=0)  # the first instance's retry, arriving late
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["attempt"], job["interruptions"]) == (1, 1)
    assert backend.launches == [0, 1]
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=1)
    reconciler.reconcile(job_id(settings, name))


def test_a_job_that_completed_is_not_restarted_by_a_late_notice(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, use_spot_instances=True, max_run=600, max_wait=3600)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=0)
    _interrupt(settings, name)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["attempt"]) == ("Completed", 0)
    assert backend.launches == [0]


def test_a_job_that_completed_in_time_is_not_stopped_for_max_wait(
    settings: Settings, source_dir: Path
) -> None:
    # The report must come before the deadline, however loaded the machine: 3 s for what
    # takes a tenth of that.
    name = submit(settings, source_dir, use_spot_instances=True, max_run=1, max_wait=3)
    _, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=0)
    time.sleep(3.2)  # the pass that sees it comes after the deadline
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Completed"


def test_instances_that_never_start_are_stopped_at_max_run(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, max_run=1)
    backend, build = _backend(settings)
    backend.pending_reason = "0/3 nodes are available"  # pending with no start timeout
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))  # launches
    reconciler.reconcile(job_id(settings, name))  # sees them pending
    assert job_state(settings, name)["pending_reason"] == (
        "Waiting for 1 of 1 instances: algo-1: 0/3 nodes are available"
    )
    time.sleep(1.2)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["secondary"]) == ("Stopped", "MaxRuntimeExceeded")
    assert job["pending_reason"] is None


def test_a_failure_reason_too_long_to_store_keeps_why_it_was_not_retried(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir)
    _, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    report(settings, name, "algo-1", "Failed", exit_code=1, failure_reason="x" * 5000)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert job["status"] == "Failed"
    assert len(job["reason"]) == 1024
    assert job["reason"].startswith("xxx")


def test_a_later_attempts_console_is_kept_when_its_runtime_never_reported(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    with session_scope(settings.database_url) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        logs.ingest(session, job.id, "algo-1", [_line(1, "first attempt's line")])
    _kill(settings, name, "algo-1")
    backend.console_text = "cannot reach the service\x00!"
    reconciler.reconcile(job_id(settings, name))  # restarts; the first attempt shipped its own line
    assert job_state(settings, name)["attempt"] == 1
    _kill(settings, name, "algo-1")
    backend.console_text = "still cannot reach it"
    settings_one = settings.model_copy(update={"max_infrastructure_restarts": 1})
    Reconciler(settings_one, build).reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Failed"
    with session_scope(settings.database_url) as session:
        job = lookup.get(session, name, SERVER_ADMIN)
        page, _ = logs.page(session, job.id, host="algo-1", cursor=None, limit=10)
        assert [(e.seq, e.message) for e in page] == [
            (1, "first attempt's line"),
            (2, "still cannot reach it"),
        ]


@pytest.mark.parametrize("spot", [True, False])
def test_a_spot_launch_without_capacity_waits_and_tries_again(
    settings: Settings, source_dir: Path, spot: bool
) -> None:
    # Long enough that a pass slowed by a busy machine does not reach the retry itself.
    settings = settings.model_copy(update={"spot_capacity_retry_seconds": 2.0})
    budget = {"use_spot_instances": True, "max_run": 600, "max_wait": 3600} if spot else {}
    name = submit(settings, source_dir, **budget)
    backend, build = _backend(settings)
    backend.out_of_capacity = 1
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    if not spot:  # on demand, the provider's refusal is the answer
        assert job["status"] == "Failed"
        assert job["reason"] == "LaunchError: InsufficientInstanceCapacity: none left"
        return
    assert (job["status"], job["secondary"]) == ("InProgress", "Pending")
    assert job["pending_reason"] == (
        "No spot capacity: InsufficientInstanceCapacity: none left; trying again in 2 s"
    )
    time.sleep(2.0)
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["secondary"], job["attempt"], job["pending_reason"]) == (
        "LaunchingInstances",
        1,
        None,
    )
    assert (job["restarts"], job["infrastructure_restarts"]) == (0, 0)
    assert backend.launches == [1]
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=1)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Completed"


def test_an_instance_that_cannot_start_as_the_job_asks_is_not_restarted(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    # As a pod whose image reference cannot be parsed reads on Kubernetes.
    ended = InstanceStatus(
        "algo-1",
        InstanceState.EXITED,
        reason="InvalidImageName: bad",
        cause=FailureCause.JOB_CONFIGURATION,
    )
    backend.describe = lambda _job: {"algo-1": ended}  # type: ignore[method-assign]
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert job["status"] == "Failed"
    assert job["reason"].startswith("InstanceLost: algo-1 ended without reporting a result")
    assert "InvalidImageName: bad" in job["reason"]
    assert backend.launches == [0]


def _line(seq: int, message: str) -> Line:
    return Line(seq, to_micros(utcnow()), "stdout", message)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of this process has ended too.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_an_instance_that_reports_itself_lost_is_restarted_by_the_cause_it_names(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    # The cause decides, not the words: these are the script's own.
    report(
        settings,
        name,
        "algo-1",
        "Failed",
        exit_code=1,
        failure_reason="my peers went quiet",
        failure_cause=FailureCause.INSTANCE_LOST,
        attempt=0,
    )
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["restarts"], job["infrastructure_restarts"]) == ("InProgress", 0, 1)
    assert backend.launches == [0, 1]
    report(settings, name, "algo-1", "Completed", exit_code=0, attempt=1)
    reconciler.reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Completed"


def test_a_script_that_says_instance_lost_is_still_the_scripts_failure(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir)
    backend, build = _backend(settings)
    reconciler = Reconciler(settings, build)
    reconciler.reconcile(job_id(settings, name))
    # The script wrote this to output/failure itself; its runtime named the cause.
    said = "InstanceLost: not really, the script wrote this"
    report(
        settings,
        name,
        "algo-1",
        "Failed",
        exit_code=1,
        failure_reason=said,
        failure_cause=FailureCause.SCRIPT_ERROR,
        attempt=0,
    )
    reconciler.reconcile(job_id(settings, name))
    job = job_state(settings, name)
    assert (job["status"], job["reason"], job["infrastructure_restarts"]) == ("Failed", said, 0)
    assert backend.launches == [0]


@pytest.mark.parametrize(
    ("reason", "exit_code", "cause"),
    [
        ("InstanceLost: algo-1 lost its peers", 1, FailureCause.INSTANCE_LOST),
        ("OutOfMemory: the script was killed with SIGKILL", 137, FailureCause.OUT_OF_MEMORY),
        ("AlgorithmError: exit 3", 3, FailureCause.SCRIPT_ERROR),
    ],
)
def test_a_report_from_a_runtime_that_names_no_cause_is_stored_with_the_one_its_reason_gave(
    settings: Settings, source_dir: Path, reason: str, exit_code: int, cause: FailureCause
) -> None:
    name = submit(settings, source_dir)
    report(settings, name, "algo-1", "Failed", exit_code=exit_code, failure_reason=reason)
    with session_scope(settings.database_url) as session:
        [row] = lookup.get(session, name, SERVER_ADMIN).instances
        assert (row.failure_reason, row.failure_cause) == (reason, cause.value)
