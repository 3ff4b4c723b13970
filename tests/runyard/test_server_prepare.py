"""What `runyard server` does before it serves: schema, signing key, admin token."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from runyard.server import prepare
from service.app import create_app
from service.kit.db import get_engine
from tests.conftest import empty_postgres_database, make_settings


def test_admin_token_is_written_once_readable_by_the_owner_only(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "home", f"sqlite:///{tmp_path / 'runyard.db'}")
    token = prepare(settings)
    token_file = settings.home / "token"
    assert token_file.read_text().strip() == token
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert prepare(settings) == token  # a restart keeps the token
    with TestClient(create_app(settings)) as client:
        listed = client.get("/v1/training-jobs", headers={"Authorization": f"Bearer {token}"})
        assert listed.status_code == 200
    get_engine(settings.database_url).dispose()


def test_a_token_the_database_does_not_know_is_replaced(tmp_path: Path) -> None:
    first = make_settings(tmp_path / "home", f"sqlite:///{tmp_path / 'one.db'}")
    old = prepare(first)
    # The same home pointed at a fresh database: the old token means nothing there.
    second = make_settings(tmp_path / "home", f"sqlite:///{tmp_path / 'two.db'}")
    new = prepare(second)
    assert new != old
    assert (second.home / "token").read_text().strip() == new
    for settings in (first, second):
        get_engine(settings.database_url).dispose()


@pytest.mark.postgres
def test_processes_preparing_one_new_database_at_once_all_succeed(tmp_path: Path) -> None:
    # A fresh Kubernetes install: the migration Job and every API replica prepare the new
    # database at the same moment.
    token = "ry_" + "s" * 40
    count = 3
    with empty_postgres_database() as url:
        context = multiprocessing.get_context("spawn")
        start, answers = context.Barrier(count), context.Queue()
        processes = [
            context.Process(
                target=_prepare_together,
                args=(url, str(tmp_path / f"home-{n}"), token, start, answers),
            )
            for n in range(count)
        ]
        for process in processes:
            process.start()
        results = [answers.get(timeout=120) for _ in processes]
        for process in processes:
            process.join(30)
        assert results == [token] * count
        engine = get_engine(url)
        with engine.connect() as connection:
            heads = connection.execute(text("SELECT count(*) FROM alembic_version")).scalar()
            admins = connection.execute(
                text("SELECT count(*) FROM api_tokens WHERE server_admin")
            ).scalar()
        engine.dispose()
    assert (heads, admins) == (1, 1)


def _prepare_together(url: str, home: str, token: str, start: Any, answers: Any) -> None:
    settings = make_settings(Path(home), url, admin_token=token)
    start.wait()
    try:
        answers.put(prepare(settings))
    except Exception as exc:
        answers.put(f"{type(exc).__name__}: {exc}"[:300])
    finally:
        get_engine(url).dispose()
