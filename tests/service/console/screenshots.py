"""Screenshots of the console for docs/console.md and the README:
``python -m tests.service.console.screenshots``.

Starts the same server as the console's tests, with a few jobs, logs and metrics, and
writes docs/console-jobs.png, docs/console-job.png, docs/console-compare.png and
docs/console-submit.png (small PNGs, 1280 px wide).
"""

from __future__ import annotations

import re
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
            for name, rate, speed in (("llama-lora-lr3", 0.001, 0.2), ("llama-lora", 0.0003, 0.3)):
                job = server.submit(
                    name,
                    metric_definitions=[*LOSS, {"name": "accuracy", "regex": r"acc=([0-9.]+)"}],
                    environment={"WANDB_API_KEY": "not-shown"},
                    hyperparameters={"epochs": 3, "learning_rate": rate, "lora_rank": 16},
                    inputs={"train": {"uri": server.source.as_uri(), "input_mode": "FastFile"}},
                    tags=[{"key": "team", "value": "llm"}],
                )
                for step in range(1, 25):
                    loss = 2.0 / (1 + step * speed)
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
        expect(page.get_by_role("link", name="llama-lora", exact=True)).to_be_visible()
        page.screenshot(path=DOCS / "console-jobs.png")
        page.get_by_role("link", name="llama-lora", exact=True).click()
        expect(page.get_by_role("img", name=re.compile("metric accuracy"))).to_contain_text("")
        expect(page.get_by_role("log")).to_contain_text("step 24")
        page.wait_for_timeout(500)
        page.screenshot(path=DOCS / "console-job.png")
        page.goto(url + "compare?job=llama-lora&job=llama-lora-lr3")
        expect(
            page.get_by_role("img", name=re.compile("metric accuracy")).locator("canvas")
        ).to_have_count(1)
        page.locator("#compare-hyper-h").evaluate("heading => heading.scrollIntoView()")
        page.wait_for_timeout(500)
        page.screenshot(path=DOCS / "console-compare.png")
        page.goto(url + "submit?clone=llama-lora")
        expect(page.get_by_label("Hyperparameter 1 name")).to_have_value("epochs")
        page.wait_for_timeout(500)
        page.screenshot(path=DOCS / "console-submit.png")
        browser.close()


if __name__ == "__main__":
    DOCS.mkdir(exist_ok=True)
    main()
