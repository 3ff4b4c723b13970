"""A job's page charts what each of its instances measures of itself: a chart per
instance metric, a line per host, updated while the page is open."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from service.auth.tokens import instance_token
from tests.service.console.server import ConsoleServer

SignIn = Callable[[str], Page]


def _measured(server: ConsoleServer, job: dict[str, Any], host: str, **values: float) -> None:
    """Samples of ``host``'s metrics, as its runtime sends them."""
    now = time.time()
    rows = [[now, metric, value] for metric, value in values.items()]
    token = instance_token(server.settings.signing_key(), job["id"], host)
    response = httpx.post(
        f"{server.url}v1/training-jobs/{job['name']}/instances/{host}/metrics",
        json={"rows": rows},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def test_a_jobs_page_charts_its_instances_metrics_per_host(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    job = server.submit("measured", instance_count=2)
    sign_in("alpha member")
    page.goto(server.url + "jobs/measured")
    section = page.get_by_role("region", name="Instance metrics")
    expect(section.get_by_text("No samples yet")).to_be_visible()

    _measured(server, job, "algo-1", CPUUtilization=180.0, MemoryUtilization=40.0)
    _measured(server, job, "algo-2", CPUUtilization=95.5)
    cpu = section.get_by_role("img", name=re.compile("CPUUtilization"))
    expect(cpu).to_have_attribute(
        "aria-label",
        re.compile(r"instance metric CPUUtilization: 2 values, latest (180|95\.5) %"),
    )
    expect(cpu.locator("canvas")).to_have_count(1)  # drawn by the charting library
    # A line per host: the chart's legend names both.
    figure = section.get_by_role("figure", name="CPUUtilization")
    expect(figure.get_by_role("rowheader", name=re.compile("algo-1"))).to_be_visible()
    expect(figure.get_by_role("rowheader", name=re.compile("algo-2"))).to_be_visible()
    memory = section.get_by_role("img", name=re.compile("MemoryUtilization"))
    expect(memory).to_have_attribute("aria-label", re.compile(r"1 values, latest 40 % on algo-1"))
    expect(section.get_by_text("No samples yet")).to_be_hidden()
    # Not among the job's own metrics (it defines none).
    own = page.get_by_role("region", name="Metrics", exact=True)
    expect(own.get_by_role("img")).to_have_count(0)
