"""Every submission reads the jobs holding instances: that read must stay on the few of
them (ix_training_jobs_held) with thousands waiting, whatever the planner's statistics."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text, update

from service.capacity.service import _live_claims_query
from service.jobs.models import HELD, TrainingJob
from service.jobs.schemas import JobCreate
from service.kit.db import session_scope, utcnow
from service.settings import Settings
from service.training import preparation, service
from tests.conftest import job_spec


def _plan(settings: Settings) -> str:
    with session_scope(settings.database_url) as session:
        bind = session.get_bind()
        query = _live_claims_query(HELD).compile(bind, compile_kwargs={"literal_binds": True})
        explain = "EXPLAIN QUERY PLAN" if bind.dialect.name == "sqlite" else "EXPLAIN"
        return "\n".join(str(row[-1]) for row in session.execute(text(f"{explain} {query}")))


def test_the_jobs_holding_instances_are_read_from_their_index(
    settings: Settings, source_dir: Path
) -> None:
    settings = settings.model_copy(update={"capacity": {"local": 1}})
    prepared = [
        (
            preparation.prepare(
                settings,
                JobCreate.model_validate(job_spec(source_dir, name=f"waits-{n}")),
                "default",
            ),
            "default",
        )
        for n in range(400)
    ]
    with session_scope(settings.database_url) as session:
        jobs = service.store_new(session, settings, prepared)
        session.execute(
            update(TrainingJob).where(TrainingJob.id == jobs[0].id).values(admitted_at=utcnow())
        )
    plan = _plan(settings)
    # Read by an index of the admitted jobs, not by one of every live job and filtered
    # (PostgreSQL took ix_training_jobs_status so, until the partial index; SQLite takes
    # ix_training_jobs_admitted's range of admitted_at).
    assert "ix_training_jobs_held" in plan or "admitted_at>?" in plan, plan
