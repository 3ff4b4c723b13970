"""A request's transaction: what a route wrote is committed before its response goes out,
and nothing of it is kept when the route fails; the check of its credentials reads
outside any transaction."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from service.auth.models import Project
from service.kit.db import autocommit_reads, session_scope
from service.kit.deps import ReadSessionDep, SessionDep
from service.kit.errors import Conflict, install_error_handler
from service.settings import Settings


@pytest.fixture
def app(settings: Settings) -> Iterator[TestClient]:
    app = FastAPI()
    app.state.settings = settings
    install_error_handler(app)

    @app.post("/projects/{name}")
    def add(name: str, session: SessionDep, fail: bool = False) -> dict[str, str]:
        session.add(Project(name=name))
        session.flush()
        if fail:
            raise Conflict("refused after writing")
        return {"added": name}

    @app.get("/projects/{name}")
    def read(name: str, session: ReadSessionDep) -> dict[str, bool]:
        return {"found": session.get(Project, name) is not None}

    with TestClient(app) as client:
        yield client


def _stored(settings: Settings, name: str) -> bool:
    with session_scope(settings.database_url, readonly=True) as session:
        return session.scalar(select(Project.name).where(Project.name == name)) is not None


def test_a_route_that_answered_has_committed(app: TestClient, settings: Settings) -> None:
    assert app.post("/projects/kept").status_code == 200
    assert _stored(settings, "kept")
    assert app.get("/projects/kept").json() == {"found": True}


def test_a_route_that_failed_after_writing_keeps_nothing(
    app: TestClient, settings: Settings
) -> None:
    response = app.post("/projects/dropped", params={"fail": True})
    assert response.status_code == 409
    assert not _stored(settings, "dropped")
    # The session and its connection went back whole: the next request works.
    assert app.post("/projects/after").status_code == 200
    assert _stored(settings, "after")


@pytest.mark.postgres
def test_credentials_are_read_outside_a_transaction(postgres_url: str) -> None:
    # now() is when the transaction began: equal across a transaction's statements, and
    # each statement's own time when there is none.
    def two_nows(session_of: object) -> tuple[object, object]:
        with session_of as session:  # type: ignore[attr-defined]
            first = session.scalar(text("SELECT now()"))
            time.sleep(0.01)
            return first, session.scalar(text("SELECT now()"))

    first, second = two_nows(autocommit_reads(postgres_url))
    assert second > first
    first, second = two_nows(session_scope(postgres_url, readonly=True))
    assert second == first
