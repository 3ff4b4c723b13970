"""The console in Debian's Chromium, driven by Playwright, against a real API server.

Playwright never downloads a browser here: it drives /usr/bin/chromium (``apt-get install
chromium``; ``.ci/run`` installs it). Without it these tests fail under CI and skip, with
the reason, elsewhere.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.service.console.server import ConsoleServer, console_server, open_page

CHROMIUM = os.environ.get("RUNYARD_TEST_CHROMIUM", "/usr/bin/chromium")
# Where the tests leave their screenshots of the console (docs/ for docs/console.md's), and
# only when this names a directory: `RUNYARD_SCREENSHOTS=docs pytest tests/service/console`.
SCREENSHOTS = os.environ.get("RUNYARD_SCREENSHOTS", "")

try:
    from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright
except ImportError:  # pragma: no cover - the dev extra installs it
    sync_playwright = None  # type: ignore[assignment]
else:
    # expect() retries its check until this long; its default (5 s) is short for a page
    # whose first requests share 2 cores with the rest of the suite.
    expect.set_options(timeout=20_000)


def _unavailable() -> str | None:
    if sync_playwright is None:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    if shutil.which(CHROMIUM) is None:
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


# Per module, not per session: while Playwright's sync API runs, its event loop counts as
# running on the test process's main thread, so any later test of that process that calls
# asyncio.run() (the log streams' tests do) would be refused.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    missing = _unavailable()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the console tests need a browser in CI: {missing}")
        pytest.skip(missing)
    with sync_playwright() as playwright:
        browser = _launch(playwright)
        yield browser
        browser.close()


def _launch(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    running = console_server(tmp_path_factory.mktemp("console")).start()
    yield running
    running.stop()


@pytest.fixture
def page(browser: Browser, server: ConsoleServer) -> Iterator[Page]:
    yield from open_page(browser, base_url=server.url, viewport={"width": 1280, "height": 900})


@pytest.fixture
def sign_in(page: Page, server: ConsoleServer) -> Callable[[str], Page]:
    """Sign ``page`` in as one of the server's tokens ("alpha viewer", "beta member"...)."""

    def signed_in(who: str) -> Page:
        page.goto(server.url + "sign-in")
        page.get_by_label("API token").fill(server.tokens[who])
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
        return page

    return signed_in


Shoot = Callable[[Page, str], None]


@pytest.fixture
def screenshot() -> Shoot:
    """``screenshot(page, "console-jobs")`` writes the page as it stands to the directory
    RUNYARD_SCREENSHOTS names, as a PNG of that name; without it, nothing."""

    def shoot(page: Page, name: str) -> None:
        if not SCREENSHOTS:
            return
        folder = Path(SCREENSHOTS)
        folder.mkdir(parents=True, exist_ok=True)
        # The pointer off every chart, and no caret blinking in a field.
        page.mouse.move(0, 0)
        page.screenshot(path=folder / f"{name}.png", caret="hide")

    return shoot
