"""Shared fixtures: real databases (SQLite and PostgreSQL), settings, an API client.

Nothing heavy is imported here at the top (the app, the server, the database layer): a unit
test's run pays only for what its own fixtures use.

PostgreSQL is not optional: CI starts it (``.ci/run``), and a test that needs it fails
rather than skips when it is down, so a green run always means both databases passed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from tests import postgres, timeouts, venvs
from tests.e2e.sdk_venvs import sdk_python
from tests.tensorflow.environment import tf_python

if TYPE_CHECKING:
    from fastapi.testclient import TestClient
    from sqlalchemy.orm import Session

    from service.settings import Settings

pytest_plugins = ["tests.kube", "tests.aws"]

POSTGRES_ADMIN_URL = os.environ.get(
    "RUNYARD_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("RUNYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
RABBITMQ_URL = os.environ.get("RUNYARD_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


# The suite's heavy environments, by the tests that need them (a path prefix).
_HEAVY: dict[str, list[Callable[[], object]]] = {
    "tests/e2e/test_sagemaker_sdk": [lambda: sdk_python("v2"), lambda: sdk_python("v3")],
    "tests/e2e/test_job_end.py": [lambda: sdk_python("v2")],
    "tests/tensorflow/": [tf_python],
}


# Files whose tests take minutes on one test process (a module fixture that runs 21
# multi-process jobs): run first, so the other process works beside them instead of
# waiting for them at the end (xdist hands out whole files in collection order).
_LONGEST_FIRST = ("tests/libraries/modelparallel/test_transformers.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(_LONGEST_FIRST))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start making the heavy environments the chosen tests need, in the background: on a
    new checkout that takes minutes, which the tests before them fill."""
    if session.config.option.collectonly:
        return  # nothing will run
    chosen = {item.nodeid for item in session.items}
    makers = [
        make
        for prefix, makes in _HEAVY.items()
        if any(nodeid.startswith(prefix) for nodeid in chosen)
        for make in makes
    ]
    if makers:
        session.config.stash[_MAKING] = venvs.make_ahead(makers)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    making = session.config.stash.get(_MAKING, None)
    if making is None:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        venvs.stop_making(making)
    else:
        # Under xdist another worker's tests may still wait for it; and made, it is kept
        # for the next run.
        making.join()


_MAKING = pytest.StashKey[threading.Thread]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test that needs a heavy environment waits for it here, before its own time bound
    starts (pytest-timeout's, which counts the fixtures): on a loaded machine making one
    takes longer than a test may (seen: a v3 SDK test timed out at 300 s on the lock of an
    environment another run was still making, with its job never started). Making takes
    at most ``venvs.BUILD_TIMEOUT``; a failure is left to the test, which says why."""
    for prefix, makes in _HEAVY.items():
        if item.nodeid.startswith(prefix):
            for make in makes:
                with contextlib.suppress(Exception, pytest.fail.Exception):
                    make()
    _stretch_time_bound(item)
    return (yield)


def _stretch_time_bound(item: pytest.Item) -> None:
    """The test's time bound (its own, or the suite's), stretched for how busy the machine
    is as it starts (``tests.timeouts``): the bound is there to end a hang."""
    factor = timeouts.busy_factor()
    if factor <= 1.0:
        return
    marker = item.get_closest_marker("timeout")
    bound = marker.args[0] if marker is not None and marker.args else None
    if marker is not None and bound is None:
        bound = marker.kwargs.get("timeout")
    if bound is None:
        bound = float(item.config.getini("timeout") or 0)
    if bound and float(bound) > 0:
        # First among its markers, so that pytest-timeout, which starts the bound after
        # this hook, finds it before the module's or the suite's.
        item.add_marker(pytest.mark.timeout(float(bound) * factor), append=False)


def require(missing: str | None) -> None:
    """What a test needs of the machine, ``missing`` saying what it lacks (None: nothing):
    under CI, which installs and starts everything (``.ci/run``), the test fails; elsewhere
    it is skipped with the reason, so that ``make test-fast`` passes on a machine with
    Python alone."""
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI has everything the tests need, but: {missing}")
    pytest.skip(missing)


@functools.cache
def _redis_missing() -> str | None:
    address = urlsplit(REDIS_URL)
    host, port = address.hostname or "127.0.0.1", address.port or 6379
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        return f"no Redis server answers at {host}:{port} (RUNYARD_TEST_REDIS_URL): {exc}"
    return None


def _nft_missing() -> str | None:
    from provisioning.local import egress

    return egress.unavailable()


def _sshd_missing() -> str | None:
    from provisioning.local import ssh_keys

    return ssh_keys.unavailable()


# The markers that say what a test needs of the machine, by how to tell what it lacks.
_NEEDS: dict[str, Callable[[], str | None]] = {
    "redis": _redis_missing,
    "nftables": _nft_missing,
    "sshd": _sshd_missing,
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, missing in _NEEDS.items():
        if item.get_closest_marker(marker) is not None:
            require(missing())


@pytest.fixture(autouse=True)
def _hermetic_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Settings read RUNYARD_*; a developer's own configuration must not leak into tests.
    for key in list(os.environ):
        if key.startswith("RUNYARD_") and not key.startswith("RUNYARD_TEST_"):
            monkeypatch.delenv(key)


@pytest.fixture(autouse=True)
def _nothing_remembered_of_access() -> None:
    # The PostgreSQL database is shared by a worker's tests (emptied after each): what a
    # process remembers of its projects and grants (service.kit.access_cache) must not
    # carry over from one test to the next.
    from service.kit import access_cache

    access_cache.forget()


def empty_postgres_database() -> contextlib.AbstractContextManager[str]:
    """A new, empty PostgreSQL database, dropped when done."""
    return postgres.empty_database(POSTGRES_ADMIN_URL, "runyard_test")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A database of its own for this test session, dropped at the end."""
    from service.kit.db import get_engine
    from service.kit.migrate import upgrade

    with empty_postgres_database() as url:
        upgrade(url)
        yield url
        get_engine(url).dispose()


@pytest.fixture(scope="session")
def _migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once for this test process: each test gets a copy, which
    spares it the migrations (a tenth of a second, over a thousand tests)."""
    from service.kit.db import get_engine
    from service.kit.migrate import upgrade

    path = tmp_path_factory.mktemp("migrated") / "runyard.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    get_engine(url).dispose()
    # Closed, the database is whole in its one file: nothing waits in a write-ahead log.
    assert [item.name for item in path.parent.iterdir()] == [path.name]
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    from sqlalchemy import text

    from service.kit.db import get_engine, session_scope
    from service.models import Base

    if request.param == "sqlite":
        path = tmp_path / "runyard.db"
        shutil.copyfile(request.getfixturevalue("_migrated_sqlite"), path)
        url = f"sqlite:///{path}"
        yield url
        get_engine(url).dispose()
        return
    url = request.getfixturevalue("postgres_url")
    yield url
    with session_scope(url) as session:
        tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
        session.execute(text(f"TRUNCATE {tables} CASCADE"))


def make_settings(home: Path, database_url: str, **overrides: object) -> Settings:
    from service.settings import Settings

    values: dict[str, object] = {
        "home": home,
        "database_url": database_url,
        "broker_url": f"sqla+sqlite:///{home / 'broker.db'}",
        "queue": f"runyard-test-{uuid.uuid4().hex[:8]}",
        # Tests keep their sources, data and outputs beside the home, in their tmp_path.
        "file_roots": [home.parent],
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return make_settings(tmp_path / "home", database_url)


@pytest.fixture
def admin_token(settings: Settings) -> str:
    from runyard.server import prepare

    return prepare(settings)


@pytest.fixture
def api(settings: Settings, admin_token: str) -> Iterator[TestClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(settings)) as client:
        client.headers["Authorization"] = f"Bearer {admin_token}"
        yield client


@pytest.fixture
def source_dir(tmp_path: Path) -> Path:
    """A source directory holding a trivial entry point."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hello from train.py')\n")
    return source


def job_spec(source_dir: Path, **overrides: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "name": "job-1",
        "entry_point": "train.py",
        "source_uri": source_dir.as_uri(),
        "instance_type": "local",
        "instance_count": 1,
    }
    spec.update(overrides)
    return spec


def grant(settings: Settings, project: str, prefix: str, access: str = "read-only") -> None:
    """Grant ``project`` (made where missing) a place, as a server administrator would: a
    project other than default reads its jobs' code, say, only where granted."""
    from service.auth.models import Project
    from service.auth.service import create_project
    from service.grants import service as grants
    from service.kit.db import session_scope

    with session_scope(settings.database_url) as session:
        if session.get(Project, project) is None:
            create_project(session, project)
        grants.grant(session, settings, project, prefix, access)  # type: ignore[arg-type]


def log_line(seq: int, second: int, message: str, stream: str = "stdout") -> dict[str, Any]:
    """One line of a batch's object form (``{"lines": [...]}``, which runtimes before
    packed batches send), at second ``second`` of a fixed minute."""
    return {
        "seq": seq,
        "time": f"2026-01-01T00:00:{second:02d}Z",
        "stream": stream,
        "message": message,
    }


class InstanceHeaders(dict[str, str]):
    """The headers algo-1 of a job reports with; ``of(host)`` gives another host's."""

    def __init__(self, settings: Settings, job_id: str) -> None:
        super().__init__(instance_headers(settings, job_id))
        self._settings = settings
        self._job_id = job_id

    def of(self, host: str) -> dict[str, str]:
        return instance_headers(self._settings, self._job_id, host)


def submit_for_instances(
    api: TestClient, settings: Settings, source_dir: Path, **spec: object
) -> InstanceHeaders:
    """Submits a job over the API; returns the headers its instances report with."""
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, **spec))
    assert response.status_code == 201, response.text
    return InstanceHeaders(settings, response.json()["id"])


def instance_headers(settings: Settings, job_id: str, host: str = "algo-1") -> dict[str, str]:
    """What the runtime on ``host`` of a job sends its reports with."""
    from service.auth.tokens import instance_token

    return {"Authorization": f"Bearer {instance_token(settings.signing_key(), job_id, host)}"}


def stored_line_count(session: Session, job_id: str | None = None) -> int:
    """How many log lines are stored (of ``job_id``, or of every job): a chunk holds one
    for each of its seqs."""
    from sqlalchemy import func, select

    from service.logs.models import LogChunk

    query = select(func.coalesce(func.sum(LogChunk.last_seq - LogChunk.first_seq + 1), 0))
    if job_id is not None:
        query = query.where(LogChunk.job_id == job_id)
    return int(session.scalar(query) or 0)
