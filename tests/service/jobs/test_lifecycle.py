"""The job's lifecycle table: closed, every live stage driven, and ``apply`` the only way
a job moves (a move the table lacks is refused and changes nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.jobs import lifecycle
from service.jobs.lifecycle import TRANSITIONS, Event, IllegalTransition
from service.jobs.models import TrainingJob
from service.jobs.states import Secondary, Stage, Status
from worker.reconciler import HANDLERS


def _job() -> TrainingJob:
    job = TrainingJob(name="job-1", transitions=[])
    lifecycle.submitted(job, "Preparing the instances")
    return job


def test_every_live_stage_has_a_handler_and_every_event_a_use() -> None:
    assert set(HANDLERS) == set(Stage) - {Stage.ENDED}
    assert {event for _, event in TRANSITIONS} == set(Event)
    reached = {outcome.stage for outcome in TRANSITIONS.values()}
    assert reached == set(Stage)


def test_nothing_leaves_the_end_and_every_live_stage_can_fail() -> None:
    assert not [key for key in TRANSITIONS if key[0] == Stage.ENDED]
    for stage in set(Stage) - {Stage.ENDED}:
        assert TRANSITIONS[(stage, Event.FAILED)].stage == Stage.ENDED
    ended = {key for key, outcome in TRANSITIONS.items() if outcome.stage == Stage.ENDED}
    assert all(
        TRANSITIONS[key].status in (Status.COMPLETED, Status.FAILED, Status.STOPPED)
        for key in ended
    )


def test_a_job_is_driven_through_its_life_by_events() -> None:
    job = _job()
    assert (job.stage, job.status, job.secondary_status) == ("Queued", "InProgress", "Starting")
    lifecycle.apply(job, Event.WAITING, "Waiting for 2 ml.m5.large")
    lifecycle.apply(job, Event.WAITING, "Waiting for 1 ml.m5.large")
    assert job.pending_reason == "Waiting for 1 ml.m5.large"
    # A changed reason rewrites the transition it waits in; it adds none.
    assert [t.secondary_status for t in job.transitions] == ["Starting", "Pending"]
    assert job.transitions[-1].message == "Waiting for 1 ml.m5.large"
    for event in (Event.ADMITTED, Event.LAUNCHING, Event.LAUNCHED, Event.TRAINING):
        lifecycle.apply(job, event, str(event))
    assert job.pending_reason is None
    assert (job.stage, job.secondary_status) == ("Running", Secondary.TRAINING)
    lifecycle.apply(job, Event.MAX_RUNTIME_EXCEEDED, "too long")
    assert (job.stage, job.status, job.stop_reason) == (
        "Stopping",
        "Stopping",
        "MaxRuntimeExceeded",
    )
    ended = lifecycle.end_of_stop(job.stop_reason)
    lifecycle.apply(job, ended, "Training job stopped")
    assert (job.stage, job.status, job.secondary_status) == (
        "Ended",
        "Stopped",
        "MaxRuntimeExceeded",
    )
    assert all(t.end_time is not None for t in job.transitions[:-1])


def test_a_move_the_table_lacks_is_refused_and_changes_nothing() -> None:
    job = _job()
    with pytest.raises(IllegalTransition, match="no Completed while Queued"):
        lifecycle.apply(job, Event.COMPLETED, "done")
    assert (job.stage, job.status, len(job.transitions)) == ("Queued", "InProgress", 1)
    lifecycle.apply(job, Event.FAILED, "broken")
    with pytest.raises(IllegalTransition):
        lifecycle.apply(job, Event.STOP_REQUESTED, "stop")


@pytest.mark.parametrize("reason", [None, "StoppedByUser", "MaxWaitTimeExceeded", "unknown"])
def test_a_stop_ends_with_the_event_its_reason_names(reason: str | None) -> None:
    expected = {
        "MaxWaitTimeExceeded": Event.STOPPED_AT_MAX_WAIT,
    }.get(reason or "", Event.STOPPED)
    assert lifecycle.end_of_stop(reason) == expected


def test_the_docs_print_the_table_itself() -> None:
    page = Path(__file__).parents[3] / "docs" / "job-lifecycle.md"
    assert page.read_text() == lifecycle.markdown(), "docs/job-lifecycle.md is stale: run make docs"
