"""The app as `runyard server` and `runyard api` serve it."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

from service.app import create_app_to_serve
from service.settings import Settings


def test_what_the_served_app_was_built_with_is_left_out_of_the_collectors_passes(
    settings: Settings,
) -> None:
    assert gc.get_freeze_count() == 0
    try:
        app = create_app_to_serve(settings)
        # The app, its routes and everything imported before it are in the permanent
        # generation, which no collection walks.
        assert gc.get_freeze_count() > 10_000
        assert app.state.settings is settings
    finally:
        gc.unfreeze()


# Modules only a request would load, were they not loaded before the freeze: the enabled
# backend, the broker's client and Celery's send path.
LOADED_FOR_REQUESTS = (
    "provisioning.local.backend",
    "kombu.transport.redis",
    "celery.backends.base",
)

_BUILD_AND_REPORT = """
import json, sys
from pathlib import Path
from service.app import create_app_to_serve
from service.kit.db import get_engine
from service.settings import Settings

home = Path(sys.argv[1])
settings = Settings(
    home=home,
    database_url=f"sqlite:///{home / 'runyard.db'}",
    # Nothing listens there: loading the client must not connect.
    broker_url="redis://127.0.0.1:9/0",
)
before = [name for name in sys.argv[2:] if name in sys.modules]
create_app_to_serve(settings)
after = [name for name in sys.argv[2:] if name in sys.modules]
pool = get_engine(settings.database_url).pool
print(json.dumps({"before": before, "after": after, "connections": pool.checkedin()}))
"""


def test_what_the_first_requests_would_load_is_loaded_before_the_freeze(tmp_path: Path) -> None:
    # A process of its own: this one has loaded everything already.
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _BUILD_AND_REPORT, str(home), *LOADED_FOR_REQUESTS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["before"] == []
    assert report["after"] == list(LOADED_FOR_REQUESTS)
    assert report["connections"] == 1  # the database's driver, connected once
