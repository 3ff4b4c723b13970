"""What `runyard server` does before it serves: schema, signing key, admin token."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from runyard.server import prepare
from service.app import create_app
from service.kit.db import get_engine
from tests.conftest import make_settings


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
