"""Every page of the console, walked through as docs/console.md shows it, with a small
team's jobs: a sweep, a fine-tune with its logs, metrics and instance samples, one that
failed, one done, and a line of jobs waiting for capacity. Each stop checks what a reader
would look for there; with RUNYARD_SCREENSHOTS set it also leaves the page's screenshot
(``RUNYARD_SCREENSHOTS=docs`` for the docs' own).
"""

from __future__ import annotations

import re
import time
from typing import Any

from playwright.sync_api import Page, expect

from tests.service.console.conftest import Shoot
from tests.service.console.server import LOSS, QUEUED_TYPE, ConsoleServer

ACCURACY = {"name": "accuracy", "regex": r"acc=([0-9.]+)"}
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 41, in <module>\n'
    "    main()\n"
    '  File "train.py", line 35, in main\n'
    "    loss = model(batch)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
)
# A fine-tune's run: a line every 5 seconds for 5 minutes, on each of its two hosts.
STEPS = 60
EVERY = 5.0


def _fine_tune(server: ConsoleServer, name: str, rate: float, speed: float) -> dict[str, Any]:
    job = server.submit(
        name,
        instance_count=2,
        metric_definitions=[*LOSS, ACCURACY],
        environment={"WANDB_API_KEY": "not-shown"},
        hyperparameters={"epochs": 3, "learning_rate": rate, "lora_rank": 16},
        inputs={"train": {"uri": server.source.as_uri(), "input_mode": "FastFile"}},
        checkpoint_s3_uri=(server.source.parent / "ckpt").as_uri(),
        tags=[{"key": "team", "value": "llm"}],
    )
    for host, lag in (("algo-1", 0.0), ("algo-2", 0.04)):
        lines = []
        for step in range(1, STEPS + 1):
            loss = 2.0 / (1 + step * speed) + lag
            lines.append(f"step {step} loss={loss:.4f} acc={1 - loss / 2.2:.4f}")
        server.log(job, *lines, host=host, spaced=EVERY)
    return job


def _samples(server: ConsoleServer, job: dict[str, Any]) -> None:
    """What each host measured of itself over the run: busy CPUs, memory growing a little."""
    now = time.time()
    for host, cpus in (("algo-1", 380.0), ("algo-2", 352.0)):
        for tick in range(STEPS):
            at = now - (STEPS - 1 - tick) * EVERY
            server.measured(
                job,
                host,
                at=at,
                CPUUtilization=cpus + (tick % 7) * 3,
                MemoryUtilization=0.1741 + tick * 0.00002,
                DiskUtilization=12.5 + tick * 0.01,
            )


def test_every_page_as_the_docs_show_it(
    page: Page, server: ConsoleServer, screenshot: Shoot
) -> None:
    for name in ("resnet-sweep-1", "resnet-sweep-2"):
        sweep = server.submit(name, instance_count=2, tags=[{"key": "sweep", "value": "resnet"}])
        server.launched(sweep)
    done = server.submit("bert-finetune", metric_definitions=LOSS)
    server.log(done, "loss=0.21")
    server.stored_model(done, b"weights")
    server.completed(done)
    failed = server.submit("vit-pretrain", metric_definitions=LOSS, instance_count=2)
    server.log(failed, "step 1 loss=6.91", "step 2 loss=6.42", spaced=EVERY)
    server.failed(failed, TRACEBACK)
    # The type with room for one: the first holds it, the others wait their turn.
    for name in ("sd-finetune", "sd-finetune-xl", "sd-finetune-768"):
        queued = server.submit(name, instance_type=QUEUED_TYPE)
        if name == "sd-finetune":
            server.launched(queued)
    server.launched(_fine_tune(server, "llama-lora-lr3", 0.001, 0.2))
    job = _fine_tune(server, "llama-lora", 0.0003, 0.3)
    server.launched(job)
    for host in ("algo-1", "algo-2"):
        server.reported(job, host, "Training", "running train.py")
    _samples(server, job)

    page.goto(server.url + "sign-in")
    expect(page.get_by_label("API token")).to_be_visible()
    screenshot(page, "console-sign-in")
    page.get_by_label("API token").fill(server.tokens["alpha member"])
    page.get_by_role("button", name="Sign in").click()

    # The list: every job, newest first, counted.
    expect(page.get_by_role("link", name="llama-lora", exact=True)).to_be_visible()
    expect(page.get_by_text("9 jobs", exact=True)).to_be_visible()
    expect(page.get_by_role("columnheader", name="Created")).to_have_attribute(
        "aria-sort", "descending"
    )
    screenshot(page, "console-jobs")

    # A running job opens on its overview: how it stands, its latest metric values.
    page.get_by_role("link", name="llama-lora", exact=True).click()
    expect(page.get_by_role("tab", name="Overview")).to_have_attribute("aria-selected", "true")
    latest = page.get_by_role("table", name="Latest metric values")
    expect(latest.get_by_role("row").filter(has_text="loss")).to_contain_text(
        re.compile(r"0\.1\d+")
    )
    screenshot(page, "console-job")

    page.get_by_role("tab", name="Logs").click()
    expect(page).to_have_url(re.compile(r"/jobs/llama-lora#logs$"))
    expect(page.get_by_role("log", name="Log lines")).to_contain_text(f"step {STEPS} ")
    screenshot(page, "console-job-logs")

    page.get_by_role("tab", name="Metrics").click()
    loss = page.get_by_role("figure", name="loss")
    expect(loss.get_by_role("img")).to_have_attribute("aria-label", re.compile("latest 0.1"))
    expect(loss.locator(".u-legend")).to_contain_text("algo-2")
    screenshot(page, "console-job-metrics")

    page.get_by_role("tab", name="Instances").click()
    expect(page.get_by_role("table", name="Instances")).to_contain_text("algo-2")
    memory = page.get_by_role("figure", name="MemoryUtilization")
    expect(memory).to_contain_text("% of the machine's memory")
    expect(memory.locator(".u-legend")).to_contain_text("%")
    screenshot(page, "console-job-instances")

    page.get_by_role("tab", name="Configuration").click()
    expect(page.get_by_role("table", name="Hyperparameters")).to_contain_text("lora_rank")
    screenshot(page, "console-job-configuration")

    # A failed one: why first, and no model with the reason.
    page.goto(server.url + "jobs/vit-pretrain")
    expect(page.get_by_label("Failure reason")).to_contain_text("CUDA out of memory")
    expect(page.get_by_role("table", name="Final metric values")).to_contain_text("6.42")
    screenshot(page, "console-job-failed")

    page.goto(server.url + "compare?job=llama-lora&job=llama-lora-lr3")
    chart = page.get_by_role("img", name=re.compile("metric accuracy"))
    expect(chart.locator("canvas")).to_have_count(1)
    page.locator("#compare-hyper-h").evaluate("heading => heading.scrollIntoView()")
    screenshot(page, "console-compare")

    page.goto(server.url + "submit?clone=llama-lora")
    expect(page.get_by_label("Metric 2 regex")).to_have_value(ACCURACY["regex"])
    page.get_by_label("Name", exact=True).fill("llama-lora-2")
    screenshot(page, "console-submit")
    page.get_by_role("button", name="Preview (dry run)").click()
    expect(page.get_by_label("Resolved job")).to_contain_text("name: llama-lora-2")
    page.get_by_role("heading", name="Dry run").evaluate("heading => heading.scrollIntoView()")
    screenshot(page, "console-submit-dry-run")

    page.get_by_role("link", name="Capacity", exact=True).click()
    queued = page.get_by_role("region", name=f"Instance type {QUEUED_TYPE}")
    expect(queued.get_by_role("heading", name="Waiting in order: 2 jobs")).to_be_visible()
    screenshot(page, "console-capacity")
