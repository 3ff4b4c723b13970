"""Screenshots of the console for docs/console.md and the README:
``python -m tests.service.console.screenshots``.

Starts the same server as the console's tests, with a few jobs, logs and metrics, and
writes docs/console-jobs.png and docs/console-job.png (small PNGs, 1280 px wide).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from tests.service.console.conftest import CHROMIUM
from tests.service.console.server import LOSS, console_server

DOCS = Path(__file__).resolve().parents[3] / "docs"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="runyard-shots-") as scratch:
        server = console_server(Path(scratch)).start()
        try:
            for name in ("resnet-sweep-1", "resnet-sweep-2", "bert-finetune"):
                server.submit(name, instance_count=2)
            job = server.submit(
                "llama-lora",
                metric_definitions=[*LOSS, {"name": "accuracy", "regex": r"acc=([0-9.]+)"}],
                environment={"WANDB_API_KEY": "not-shown"},
            )
            for step in range(1, 25):
                loss = 2.0 / (1 + step * 0.3)
                server.log(job, f"step {step} loss={loss:.4f} acc={1 - loss / 2.2:.4f}")
            _shoot(server.url, server.tokens["alpha member"])
        finally:
            server.stop()


def _shoot(url: str, token: str) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url + "sign-in")
        page.get_by_label("API token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("link", name="llama-lora")).to_be_visible()
        page.screenshot(path=DOCS / "console-jobs.png")
        page.get_by_role("link", name="llama-lora").click()
        expect(page.get_by_role("img", name="accuracy")).to_contain_text("")
        expect(page.get_by_role("log")).to_contain_text("step 24")
        page.wait_for_timeout(500)
        page.screenshot(path=DOCS / "console-job.png")
        browser.close()


if __name__ == "__main__":
    DOCS.mkdir(exist_ok=True)
    main()
