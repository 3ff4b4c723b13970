"""An API process remembers who holds a bearer token for a moment (token_cache_seconds):
what it remembered must never outlive a revocation made through it, and one made through
another replica (here: written to the database directly) only for that moment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from runyard.server import prepare
from service.app import create_app
from service.auth.access import Principal
from service.auth.models import ApiToken
from service.auth.principal_cache import PrincipalCache
from service.kit.db import session_scope, utcnow
from service.settings import Settings
from tests.conftest import make_settings


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _api(settings: Settings, clock: _Clock) -> TestClient:
    app = create_app(settings)
    app.state.principals = PrincipalCache(settings.token_cache_seconds, timer=clock)
    return TestClient(app)


def _mint(api: TestClient, admin: str, name: str) -> str:
    minted = api.post(
        "/v1/tokens",
        json={"name": name, "role": "viewer"},
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert minted.status_code == 201, minted.text
    return str(minted.json()["token"])


def _revoke_elsewhere(database_url: str, name: str) -> None:
    """As another API replica of the deployment would: straight into the database."""
    with session_scope(database_url) as session:
        session.execute(update(ApiToken).where(ApiToken.name == name).values(revoked_at=utcnow()))


def _jobs(api: TestClient, token: str) -> int:
    return api.get("/v1/training-jobs", headers={"Authorization": f"Bearer {token}"}).status_code


@pytest.fixture
def clock() -> _Clock:
    return _Clock()


@pytest.fixture
def cached_api(settings: Settings, clock: _Clock) -> Iterator[tuple[TestClient, str]]:
    cached = settings.model_copy(update={"token_cache_seconds": 5})
    with _api(cached, clock) as api:
        yield api, prepare(cached)


def test_a_token_revoked_by_another_replica_is_refused_once_the_moment_passes(
    cached_api: tuple[TestClient, str], settings: Settings, clock: _Clock
) -> None:
    api, admin = cached_api
    token = _mint(api, admin, "vera")
    assert _jobs(api, token) == 200
    _revoke_elsewhere(settings.database_url, "vera")
    clock.now += 4
    assert _jobs(api, token) == 200  # remembered: this process did not see the revocation
    clock.now += 2
    assert _jobs(api, token) == 401


def test_a_token_revoked_through_this_process_is_refused_at_once(
    cached_api: tuple[TestClient, str], clock: _Clock
) -> None:
    api, admin = cached_api
    token = _mint(api, admin, "vera")
    assert _jobs(api, token) == 200
    revoked = api.delete("/v1/tokens/vera", headers={"Authorization": f"Bearer {admin}"})
    assert revoked.status_code == 204
    assert _jobs(api, token) == 401


def test_with_no_cache_a_revocation_elsewhere_is_refused_at_once(
    tmp_path: Path, database_url: str, clock: _Clock
) -> None:
    settings = make_settings(tmp_path / "home", database_url, token_cache_seconds=0)
    admin = prepare(settings)
    with _api(settings, clock) as api:
        token = _mint(api, admin, "vera")
        assert _jobs(api, token) == 200
        _revoke_elsewhere(settings.database_url, "vera")
        assert _jobs(api, token) == 401


def test_a_holder_read_before_a_revocation_is_not_remembered_after_it(clock: _Clock) -> None:
    cache = PrincipalCache(5, timer=clock)
    vera = Principal(kind="user", name="vera", project="default", token_id=7)
    generation = cache.generation  # a request starts reading the token's row ...
    cache.forget_all()  # ... a revocation commits ...
    cache.remember("hash", vera, generation)  # ... and the request's read comes back
    assert cache.get("hash") is None
    cache.remember("hash", vera, cache.generation)
    assert cache.get("hash") == vera
