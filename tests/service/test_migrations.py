"""The migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, select, text

from service.jobs import repository
from service.jobs.models import JobInstance, JobWritePlace, MetricRollup, TrainingJob
from service.kit.db import get_engine, session_scope
from service.kit.migrate import alembic_config, upgrade
from service.logs import service as logs
from service.logs.models import LogChunk
from service.models import Base
from tests.conftest import empty_postgres_database


def test_migrated_schema_matches_the_models(database_url: str) -> None:
    upgrade(database_url)  # a second upgrade is a no-op
    with get_engine(database_url).connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": False})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_jobs_and_tokens_from_before_projects_move_to_the_default_project(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0007")
    with get_engine(url).begin() as connection:
        for token_id, name in ((1, "admin"), (2, "ci"), (3, "ci")):
            connection.execute(
                text(
                    "INSERT INTO api_tokens (id, name, prefix, token_hash, created_at) "
                    "VALUES (:id, :name, 'ry_', :hash, CURRENT_TIMESTAMP)"
                ),
                {"id": token_id, "name": name, "hash": f"hash-{token_id}"},
            )
        connection.execute(
            text(
                "INSERT INTO training_jobs (id, name, spec, backend, status, secondary_status, "
                "tenant, created_at, updated_at, attempt, restarts, infrastructure_restarts, "
                "interruptions, attempt_first_log_seq, version) VALUES ('j1', 'job-1', '{}', "
                "'local', 'Completed', 'Completed', 'ci', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, "
                "0, 0, 0, 0, 1, 1)"
            )
        )
    upgrade(url)
    with get_engine(url).connect() as connection:
        tokens = connection.execute(
            text("SELECT name, project, role, server_admin FROM api_tokens ORDER BY id")
        ).all()
        jobs = connection.execute(text("SELECT name, project FROM training_jobs")).all()
        projects = connection.execute(text("SELECT name FROM projects")).scalars().all()
    # Everyone could do everything before: each keeps that within the default project, and
    # a repeated name gets its id so names are unique within the project.
    assert [tuple(row) for row in tokens] == [
        ("admin", "default", "admin", False),
        ("ci", "default", "admin", False),
        ("ci-3", "default", "admin", False),
    ]
    assert [tuple(row) for row in jobs] == [("job-1", "default")]
    assert projects == ["default"]


@contextlib.contextmanager
def _database_at(engine: str, tmp_path: Path, revision: str) -> Iterator[str]:
    """A database of ``engine`` ("sqlite" or "postgres") migrated up to ``revision``."""
    with contextlib.ExitStack() as stack:
        url = (
            f"sqlite:///{tmp_path / 'old.db'}"
            if engine == "sqlite"
            else stack.enter_context(empty_postgres_database())
        )
        upgrade(url, revision)
        yield url
        get_engine(url).dispose()


def _insert_job(connection: Connection, job_id: str, spec: dict[str, object], status: str) -> None:
    """A job as a server of the revisions after 0011 wrote it (no later columns)."""
    connection.execute(
        text(
            "INSERT INTO training_jobs (id, name, spec, backend, status, secondary_status, "
            "project, created_at, updated_at, attempt, restarts, infrastructure_restarts, "
            "interruptions, attempt_first_log_seq, version) VALUES (:id, :name, :spec, "
            "'local', :status, 'Pending', 'default', :created, :created, 0, 0, 0, 0, 1, 1)"
        ),
        {
            "id": job_id,
            "name": f"job-{job_id}",
            "spec": json.dumps(spec),
            "status": status,
            # In the order of their ids.
            "created": datetime(2026, 6, 1) + timedelta(seconds=int(job_id.removeprefix("j"))),
        },
    )


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_points_stored_before_rollups_are_summed_into_them(engine: str, tmp_path: Path) -> None:
    with _database_at(engine, tmp_path, "0012") as url:
        with get_engine(url).begin() as connection:
            _insert_job(connection, "j1", {}, "Completed")
            # As each database holds what SQLAlchemy wrote: 12:00:10, 12:00:50, 12:01:05.
            for seq, (second, value) in enumerate(((10, 1.0), (50, 3.0), (65, 7.0)), 1):
                connection.execute(
                    text(
                        "INSERT INTO metric_points (job_id, name, host, seq, time, value) "
                        "VALUES ('j1', 'loss', 'algo-1', :seq, :time, :value)"
                    ),
                    {
                        "seq": seq,
                        "time": datetime(2026, 6, 1, 12) + timedelta(seconds=second),
                        "value": value,
                    },
                )
        upgrade(url)
        with session_scope(url, readonly=True) as session:
            rows = session.scalars(select(MetricRollup).order_by(MetricRollup.minute)).all()
            summed = [(row.minute, row.count, row.total, row.low, row.high) for row in rows]
    noon = datetime(2026, 6, 1, 12, tzinfo=UTC)
    assert summed == [
        (noon, 2, 4.0, 1.0, 3.0),
        (noon + timedelta(minutes=1), 1, 7.0, 7.0, 7.0),
    ]


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_jobs_waiting_before_the_priority_column_keep_their_place(
    engine: str, tmp_path: Path
) -> None:
    with _database_at(engine, tmp_path, "0013") as url:
        with get_engine(url).begin() as connection:
            _insert_job(connection, "j1", {"priority": -3}, "InProgress")
            _insert_job(connection, "j2", {}, "InProgress")
            _insert_job(connection, "j3", {"priority": 7}, "InProgress")
            _insert_job(connection, "j4", {"priority": 9}, "Completed")  # not in line
            _insert_job(connection, "j5", {"priority": 0}, "InProgress")
        upgrade(url)
        with session_scope(url, readonly=True) as session:
            priorities = dict(session.execute(select(TrainingJob.id, TrainingJob.priority)).all())
            line = repository.first_in_line(session, 10)
    assert priorities == {"j1": -3, "j2": 0, "j3": 7, "j4": 9, "j5": 0}
    assert line == ["j3", "j2", "j5", "j1"]


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_tokens_from_before_random_access_keys_keep_theirs(engine: str, tmp_path: Path) -> None:
    from service.auth import service as auth
    from service.auth.tokens import legacy_access_key_id

    key = b"signing key"
    with _database_at(engine, tmp_path, "0016") as url:
        with get_engine(url).begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO api_tokens (id, name, project, role, server_admin, prefix, "
                    "token_hash, created_at) VALUES (7, 'ci', 'default', 'member', false, "
                    "'ry_', 'hash-7', CURRENT_TIMESTAMP)"
                )
            )
        upgrade(url)
        with session_scope(url) as session:
            old_id, old_secret = auth.aws_credentials(session, key, 7)
            new = auth.create_token(session, "new")
            made = auth.authenticate(session, key, new)
            assert made is not None
            assert made.token_id is not None
            new_id, _ = auth.aws_credentials(session, key, made.token_id)
            holder = auth.access_key_holder(session, key, old_id)
            by_number = auth.access_key_holder(session, key, legacy_access_key_id(made.token_id))
    # The key the token had is still its key, and signs with the same secret.
    assert old_id == legacy_access_key_id(7)
    assert holder is not None
    assert (holder[0].token_id, holder[1]) == (7, old_secret)
    # A token made since has a random id, and its row's number names nothing.
    assert new_id != legacy_access_key_id(made.token_id)
    assert by_number is None


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_lines_searched_as_they_were_stored_are_not_searched_again(
    engine: str, tmp_path: Path
) -> None:
    """Before cursors, points were found as lines were stored: a live job's hosts start
    after their last line; an ended job's lines are searched no more, and get none."""
    with _database_at(engine, tmp_path, "0017") as url:
        with get_engine(url).begin() as connection:
            _insert_job(connection, "j1", {}, "InProgress")
            _insert_job(connection, "j2", {}, "Completed")
            for job_id, host, seq in (
                ("j1", "algo-1", 7),
                ("j1", "algo-2", 3),
                ("j2", "algo-1", 5),
            ):
                connection.execute(
                    text(
                        "INSERT INTO log_events (job_id, host, stream, seq, time, message) "
                        "VALUES (:job, :host, 'stdout', :seq, :time, 'loss=1')"
                    ),
                    {"job": job_id, "host": host, "seq": seq, "time": datetime(2026, 6, 1)},
                )
        upgrade(url)
        with get_engine(url).begin() as connection:
            cursors = connection.execute(
                text("SELECT job_id, host, seq, stopped FROM metric_cursors ORDER BY host")
            ).all()
    assert [tuple(row) for row in cursors] == [("j1", "algo-1", 7, None), ("j1", "algo-2", 3, None)]


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_jobs_from_before_the_stage_column_get_the_stage_their_columns_told(
    engine: str, tmp_path: Path
) -> None:
    with _database_at(engine, tmp_path, "0018") as url:
        with get_engine(url).begin() as connection:
            for job_id, status in (
                ("j1", "InProgress"),
                ("j2", "InProgress"),
                ("j3", "InProgress"),
                ("j4", "InProgress"),
                ("j5", "Stopping"),
                ("j6", "Failed"),
                ("j7", "InProgress"),
            ):
                _insert_job(connection, job_id, {}, status)
            at = datetime(2026, 6, 2)
            for job_id, column, value in (
                ("j2", "admitted_at", at),
                ("j3", "admitted_at", at),
                ("j3", "launched_at", at),
                ("j4", "admitted_at", at),
                ("j4", "launched_at", at),
                ("j4", "restart_cause", '{"kind": "application"}'),
                ("j5", "restart_cause", '{"kind": "application"}'),
                ("j7", "restart_cause", '{"kind": "capacity"}'),
            ):
                connection.execute(
                    text(f"UPDATE training_jobs SET {column} = :value WHERE id = :id"),
                    {"value": value, "id": job_id},
                )
        upgrade(url)
        with session_scope(url, readonly=True) as session:
            stages = dict(session.execute(select(TrainingJob.id, TrainingJob.stage)).all())
            line = repository.first_in_line(session, 10)
    assert stages == {
        "j1": "Queued",
        "j2": "Launching",
        "j3": "Running",
        "j4": "Restarting",
        "j5": "Stopping",  # a stop outranks a restart under way
        "j6": "Ended",
        "j7": "Restarting",  # waiting for spot capacity, not in line
    }
    assert line == ["j1"]


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_jobs_stored_before_places_were_recorded_keep_the_places_they_wrote(
    engine: str, tmp_path: Path
) -> None:
    """A job from before places were recorded holds its output folder and checkpoints
    all the same: another project's job may not write there, nor be granted it."""
    with _database_at(engine, tmp_path, "0022") as url:
        with get_engine(url).begin() as connection:
            _insert_job(
                connection,
                "j1",
                {"output_path": "file:///data/team/", "checkpoint_s3_uri": "s3://ckpt//a/./b"},
                "Completed",
            )
            _insert_job(connection, "j2", {"output_path": "s3://models/x/../y"}, "InProgress")
        upgrade(url)
        with session_scope(url, readonly=True) as session:
            rows = session.execute(
                select(JobWritePlace.job_id, JobWritePlace.project, JobWritePlace.key).order_by(
                    JobWritePlace.job_id, JobWritePlace.key
                )
            ).all()
    assert [tuple(row) for row in rows] == [
        ("j1", "default", "file:///data/team/job-j1"),
        ("j1", "default", "s3://ckpt/a/b"),
        ("j2", "default", "s3://models/y/job-j2"),
    ]


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_instances_that_failed_before_causes_were_stored_get_the_one_their_reason_gave(
    engine: str, tmp_path: Path
) -> None:
    """A job that lost an instance just before the upgrade still restarts after it."""
    with _database_at(engine, tmp_path, "0023") as url:
        with get_engine(url).begin() as connection:
            _insert_job(connection, "j1", {}, "InProgress")
            for host, phase, code, reason in (
                ("algo-1", "Failed", 1, "InstanceLost: algo-1 lost its peers"),
                ("algo-2", "Failed", 137, "OutOfMemory: killed"),
                ("algo-3", "Failed", 3, "AlgorithmError: exit 3, also InstanceLost: no"),
                ("algo-4", "Completed", 0, None),
            ):
                connection.execute(
                    text(
                        "INSERT INTO job_instances (job_id, host, phase, message, exit_code, "
                        "failure_reason, reported_at) VALUES ('j1', :host, :phase, '', :code, "
                        ":reason, :at)"
                    ),
                    {
                        "host": host,
                        "phase": phase,
                        "code": code,
                        "reason": reason,
                        "at": datetime(2026, 6, 1),
                    },
                )
        upgrade(url)
        with session_scope(url, readonly=True) as session:
            causes = dict(
                session.execute(select(JobInstance.host, JobInstance.failure_cause)).all()
            )
    assert causes == {
        "algo-1": "InstanceLost",
        "algo-2": "OutOfMemory",
        "algo-3": "ScriptError",
        "algo-4": None,
    }


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_lines_stored_a_row_each_become_chunks_and_back(engine: str, tmp_path: Path) -> None:
    """Each host's runs of consecutive seqs become chunks, cut where a run spans more than
    a chunk may; every line reads back as it was, in time order across hosts; and a
    downgrade stores them a row each again."""
    noon = datetime(2026, 6, 1, 12)
    stored = [
        ("algo-1", 1, 0, "stdout", "one"),
        ("algo-1", 2, 1, "stderr", "two ☃"),
        ("algo-1", 4, 2, "stdout", "four, after a gap"),
        ("algo-1", 5, 100, "stdout", "five, a chunk's span later"),
        ("algo-2", 1, 1, "stdout", "algo-2's first"),
    ]
    with _database_at(engine, tmp_path, "0026") as url:
        with get_engine(url).begin() as connection:
            _insert_job(connection, "j1", {}, "Completed")
            for host, seq, second, stream, message in stored:
                connection.execute(
                    text(
                        "INSERT INTO log_events (job_id, host, stream, seq, time, message) "
                        "VALUES ('j1', :host, :stream, :seq, :time, :message)"
                    ),
                    {
                        "host": host,
                        "stream": stream,
                        "seq": seq,
                        "time": noon + timedelta(seconds=second, microseconds=seq),
                        "message": message,
                    },
                )
        upgrade(url)
        with session_scope(url, readonly=True) as session:
            chunks = session.execute(
                select(LogChunk.host, LogChunk.first_seq, LogChunk.last_seq).order_by(
                    LogChunk.host, LogChunk.first_seq
                )
            ).all()
            lines, _ = logs.page(session, "j1", host=None, cursor=None, limit=100)
        assert [tuple(chunk) for chunk in chunks] == [
            ("algo-1", 1, 2),
            ("algo-1", 4, 4),
            ("algo-1", 5, 5),
            ("algo-2", 1, 1),
        ]
        assert [(line.host, line.seq, line.stream, line.message, line.time) for line in lines] == [
            (
                host,
                seq,
                stream,
                message,
                (noon + timedelta(seconds=second, microseconds=seq)).replace(tzinfo=UTC),
            )
            for host, seq, second, stream, message in sorted(
                stored, key=lambda row: (row[2], row[1])
            )
        ]
        config = alembic_config(url)
        with get_engine(url).begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0026")
        with get_engine(url).begin() as connection:
            rows = connection.execute(
                text("SELECT host, seq, stream, message, time FROM log_events ORDER BY host, seq")
            ).all()
        assert [tuple(row[:4]) for row in rows] == [
            (host, seq, stream, message) for host, seq, _, stream, message in stored
        ]
