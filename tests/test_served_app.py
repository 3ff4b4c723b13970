"""The app as `runyard server` and `runyard api` serve it."""

from __future__ import annotations

import gc

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
