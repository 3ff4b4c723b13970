"""Training and billable seconds as SageMaker defines them, decided by the reconciler: real
database, real local instances (processes that only sleep; the test plays their runtimes'
part, at the times it chooses), and DescribeTrainingJob's answer read back.

TrainingTimeInSeconds is TrainingEndTime - TrainingStartTime: from the instances' start
(before their downloads) to the job's result (after the model's upload).
BillableTimeInSeconds is what the attempts' instances worked, at the spot price on spot,
never more than the training time; the SDK prints (1 - billable / training) * 100 as a
spot job's savings, which is what Runyard stores.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contract.phases import Phase
from contract.protocol import InterruptionNotice, StatusReport
from provisioning.base import LaunchRequest, Materialized
from provisioning.local.backend import LocalPlan
from provisioning.local.stand_ins import ImageDecision
from runtime.linux.procfs import ProcessId, is_alive
from service.jobs import billing
from service.jobs.models import TrainingJob
from service.kit.db import session_scope, utcnow
from service.sagemaker import translate
from service.settings import Settings
from service.training import service
from tests.instances import SleepingInstances
from tests.jobs import SERVER_ADMIN, job_dir, job_id, named, submit
from worker.reconciler import Reconciler
from worker.reconciler.billing import Worked, bill_attempt

SPOT_PRICE_RATIO = 0.3
# How long the instances of the test below take to go once told to: they ignore SIGTERM
# and are killed after the teardown's grace, as an EC2 instance takes its time to shut down.
SLOW_TEARDOWN_SECONDS = 2.0


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "stop_grace_seconds": 0.0,
            "spot_grace_seconds": 5.0,
            "spot_price_ratio": SPOT_PRICE_RATIO,
        }
    )


class SlowToGo(SleepingInstances):
    """Sleepers that ignore SIGTERM: the teardown waits out its grace, then kills them."""

    def __init__(self, jobs_dir: Path) -> None:
        super().__init__(jobs_dir, teardown_grace=SLOW_TEARDOWN_SECONDS)

    def launch_plan(
        self,
        request: LaunchRequest,
        image: ImageDecision | None = None,
        choosing: contextlib.ExitStack | None = None,
    ) -> Materialized[LocalPlan]:
        materialized = super().launch_plan(request, image, choosing)
        ignore = (
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
        )
        for instance in materialized.plan.instances:
            instance.argv[:] = [sys.executable, "-c", ignore]
        return materialized


def _reconciler(settings: Settings, backend: SleepingInstances) -> Reconciler:
    return Reconciler(settings, lambda _name, _settings: backend)


def _report(
    settings: Settings, name: str, host: str, phase: str, at: datetime, attempt: int = 0
) -> None:
    """What the runtime on ``host`` reports, stamped ``at`` by its clock."""
    final = {"exit_code": 0} if phase == "Completed" else {}
    sent = StatusReport(phase=Phase(phase), time=at, attempt=attempt, **final)
    with session_scope(settings.database_url) as session:
        service.record_report(session, settings, named(session, name), host, sent)


def _described(settings: Settings, name: str) -> tuple[dict[str, Any], float | None]:
    """DescribeTrainingJob's answer for the job, and the savings Runyard stored."""
    with session_scope(settings.database_url) as session:
        job = named(session, name)
        return translate.described(job, "us-east-1", SERVER_ADMIN), job.spot_savings_percent


def _some_time_ago(seconds: float) -> datetime:
    return (utcnow() - timedelta(seconds=seconds)).replace(microsecond=0)


def test_an_on_demand_job_is_billed_its_training_time_and_not_its_teardown(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, instance_count=2)
    reconciler = _reconciler(settings, SlowToGo(settings.jobs_dir))
    reconciler.reconcile(job_id(settings, name))  # launched
    for host in ("algo-1", "algo-2"):
        _wait_until_deaf_to_sigterm(_leader(settings, name, host))
    start = _some_time_ago(60)
    for host in ("algo-1", "algo-2"):
        _report(settings, name, host, "Downloading", start)
        _report(settings, name, host, "Training", start + timedelta(seconds=5))
    _report(settings, name, "algo-2", "Completed", start + timedelta(seconds=20))
    _report(settings, name, "algo-1", "Uploading", start + timedelta(seconds=20))
    # The model's upload is part of the training time, as on SageMaker.
    end = start + timedelta(seconds=25, milliseconds=700)
    _report(settings, name, "algo-1", "Completed", end)
    began = time.monotonic()
    reconciler.reconcile(job_id(settings, name))
    assert time.monotonic() - began >= SLOW_TEARDOWN_SECONDS  # the teardown took its time
    described, savings = _described(settings, name)
    assert described["TrainingJobStatus"] == "Completed"
    assert described["TrainingTimeInSeconds"] == 25
    assert described["BillableTimeInSeconds"] == 25
    assert (described["TrainingStartTime"], described["TrainingEndTime"]) == (start, end)
    assert savings is None
    assert not job_dir(settings, name).exists()


def test_a_spot_job_is_billed_what_its_attempts_worked_at_the_spot_price(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, use_spot_instances=True, max_run=3600, max_wait=7200)
    backend = SlowToGo(settings.jobs_dir)
    reconciler = _reconciler(settings, backend)
    reconciler.reconcile(job_id(settings, name))
    start = _some_time_ago(400)
    _report(settings, name, "algo-1", "Downloading", start)
    leader = _leader(settings, name, "algo-1")
    _wait_until_deaf_to_sigterm(leader)
    with session_scope(settings.database_url) as session:
        notice = InterruptionNotice(message="capacity reclaimed", attempt=0)
        service.notice_interruption(session, settings, named(session, name), "algo-1", notice)
    reconciler.reconcile(job_id(settings, name))  # SIGTERM, and the grace to checkpoint
    # Its runtime saved a checkpoint, said so 100 s in, and exited.
    _report(settings, name, "algo-1", "Stopped", start + timedelta(seconds=100))
    os.killpg(leader.pid, signal.SIGKILL)
    _wait_until_gone(leader)
    reconciler.reconcile(job_id(settings, name))  # torn down, billed, launched again
    assert backend.launches == [0, 1]
    # Capacity came back after 100 s, and the second attempt ran for 190 s.
    _report(settings, name, "algo-1", "Downloading", start + timedelta(seconds=200), attempt=1)
    _report(settings, name, "algo-1", "Completed", start + timedelta(seconds=390), attempt=1)
    reconciler.reconcile(job_id(settings, name))
    described, savings = _described(settings, name)
    assert described["TrainingJobStatus"] == "Completed"
    # The wait for capacity is training time, not billed time: (100 + 190) s at 0.3.
    assert described["TrainingTimeInSeconds"] == 390
    assert described["BillableTimeInSeconds"] == int(290 * SPOT_PRICE_RATIO) == 87
    # What the SageMaker SDK prints (sagemaker.session.logs_for_job), from the same answer.
    printed = (1 - float(described["BillableTimeInSeconds"]) / 390) * 100
    assert savings == 77.7
    assert f"{printed:.1f}" == f"{savings:.1f}"


def test_max_run_bounds_the_time_the_instances_worked_over_every_attempt(
    settings: Settings, source_dir: Path
) -> None:
    name = submit(settings, source_dir, use_spot_instances=True, max_run=300, max_wait=7200)
    backend = SleepingInstances(settings.jobs_dir)
    reconciler = _reconciler(settings, backend)
    reconciler.reconcile(job_id(settings, name))
    with session_scope(settings.database_url) as session:
        # An earlier attempt worked 250 s; this one started 60 s ago.
        named(session, name).worked_seconds = 250.0
    _report(settings, name, "algo-1", "Downloading", _some_time_ago(60))
    reconciler.reconcile(job_id(settings, name))
    with session_scope(settings.database_url) as session:
        job = named(session, name)
        assert (job.status, job.stop_reason) == ("Stopped", "MaxRuntimeExceeded")


@pytest.mark.parametrize("spot_price_ratio", [None, SPOT_PRICE_RATIO, 0.65, 1.0])
@pytest.mark.parametrize("skew", [0.0, 3.7, -2.2])
def test_billable_never_exceeds_training_over_attempts_and_skewed_clocks(
    spot_price_ratio: float | None, skew: float
) -> None:
    """Attempts of a job billed as the reconciler bills them, the instances' clocks
    ``skew`` seconds off the service's: whatever the attempts, billable <= training."""
    start = datetime(2026, 1, 1)
    for attempts in (1, 2, 3):
        for seconds in (0.3, 1.0, 1.99, 7.5, 13.9, 59.9, 3601.2):
            job = TrainingJob(worked_seconds=None, billable_seconds=None)
            at = start
            for _ in range(attempts):
                job.launched_at = at
                begun = at + timedelta(seconds=1 + skew)
                ended = begun + timedelta(seconds=seconds)
                at = ended + timedelta(seconds=5)  # the wait before a restart
                bill_attempt(job, Worked(begun, max(begun, ended)), ended, spot_price_ratio)
            assert job.training_start_time is not None
            assert job.billable_seconds is not None
            training = billing.training_seconds(job.training_start_time, ended)
            assert 1 <= job.billable_seconds <= training, (attempts, seconds, skew)
            if spot_price_ratio is None and attempts == 1:
                assert job.billable_seconds == training
            elif spot_price_ratio is not None and job.billable_seconds > 1:
                # Savings of at least the spot price's share, whatever the fractions.
                assert job.billable_seconds <= training * spot_price_ratio, (attempts, seconds)


@pytest.mark.parametrize(
    ("billable", "training", "printed"),
    # What the SageMaker SDK prints as "Managed Spot Training savings" for these times.
    [(3, 10, 70.0), (1, 2, 50.0), (87, 390, 77.7), (2, 2, 0.0), (1, 3, 66.7)],
)
def test_the_savings_are_what_the_sdk_prints(billable: int, training: int, printed: float) -> None:
    assert billing.spot_savings_percent(billable, training) == printed


def _leader(settings: Settings, name: str, host: str) -> ProcessId:
    return ProcessId(**json.loads((job_dir(settings, name) / f"{host}.pid.json").read_text()))


def _wait_until_deaf_to_sigterm(leader: ProcessId, timeout: float = 10.0) -> None:
    """Until the sleeper ignores SIGTERM: one that gets it while Python starts dies."""
    deadline = time.monotonic() + timeout
    while True:
        status = Path(f"/proc/{leader.pid}/status").read_text()
        ignored = int(
            next(line for line in status.splitlines() if line.startswith("SigIgn:"))[7:], 16
        )
        if ignored & (1 << (signal.SIGTERM - 1)):
            return
        assert time.monotonic() < deadline, "the sleeper never ignored SIGTERM"
        time.sleep(0.01)


def _wait_until_gone(leader: ProcessId, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while is_alive(leader):
        assert time.monotonic() < deadline, "the instance did not end"
        time.sleep(0.02)
