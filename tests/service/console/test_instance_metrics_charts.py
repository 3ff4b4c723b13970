"""A job's charts: a chart per instance metric with a line per host, updated while the
page is open; axes that say their unit and ticks that tell close values apart; legends
that name each line with its latest value."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Page, expect

from tests.service.console.server import LOSS, ConsoleServer

SignIn = Callable[[str], Page]

# Keeps every uPlot chart the page makes in window.plots, for the test to read what a
# chart drew on its canvas (its axes' tick labels), which no element holds.
RECORD_PLOTS = """
(() => {
  let recording;
  Object.defineProperty(window, "uPlot", {
    configurable: true,
    get: () => recording,
    set: (real) => {
      recording = function (...args) {
        const plot = new real(...args);
        (window.plots = window.plots || []).push(plot);
        return plot;
      };
      Object.assign(recording, real);
    },
  });
})();
"""

# What each chart on the page shows: its figure's name, its axes' titles and tick labels
# (uPlot keeps the labels it drew in ``axes[i]._values``).
DRAWN = """
() => Object.fromEntries(window.plots.filter((p) => p.root.isConnected).map((p) => [
  p.root.closest("figure").getAttribute("aria-label"),
  { x: p.axes[0]._values, y: p.axes[1]._values, xTitle: p.axes[0].label, yTitle: p.axes[1].label },
]))
"""


def test_a_jobs_page_charts_its_instances_metrics_per_host(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    job = server.submit("measured", instance_count=2)
    sign_in("alpha member")
    page.goto(server.url + "jobs/measured#instances")
    section = page.get_by_role("region", name="Instance metrics")
    expect(section.get_by_text("No samples yet")).to_be_visible()

    server.measured(job, "algo-1", CPUUtilization=180.0, MemoryUtilization=40.0)
    server.measured(job, "algo-2", CPUUtilization=95.5)
    cpu = section.get_by_role("img", name=re.compile("CPUUtilization"))
    expect(cpu).to_have_attribute(
        "aria-label",
        re.compile(
            r"instance metric CPUUtilization \(% of one CPU, summed over CPUs\): "
            r"2 values, latest (180|95\.5) %"
        ),
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
    page.get_by_role("tab", name="Metrics").click()
    own = page.get_by_role("tabpanel", name="Metrics")
    expect(own.get_by_text("This job defines no metrics")).to_be_visible()
    expect(own.get_by_role("img")).to_have_count(0)


def _legend(figure: Any) -> dict[str, str]:
    """A chart's legend as it reads: each line's name and the value shown beside it."""
    rows = figure.locator(".u-legend tr")
    return {
        row.locator("th").inner_text().strip().rstrip(":"): row.locator("td").inner_text().strip()
        for row in rows.all()
    }


def test_charts_have_units_on_their_axes_and_legends_with_values(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    job = server.submit("units", instance_count=2, metric_definitions=LOSS)
    # Memory that barely moves: 0.1741 % to 0.1749 % of the machine, over a minute.
    start = time.time() - 60
    for tick, value in enumerate((0.1741, 0.1743, 0.1745, 0.1747, 0.1749)):
        for host in ("algo-1", "algo-2"):
            server.measured(job, host, at=start + tick * 15, MemoryUtilization=value)
    server.log(job, "loss=0.75", "loss=0.5", host="algo-1")
    server.log(job, "loss=0.625", host="algo-2")
    page.add_init_script(RECORD_PLOTS)
    sign_in("alpha member")
    page.goto(server.url + "jobs/units#instances")

    figure = page.get_by_role("figure", name="MemoryUtilization")
    expect(figure.get_by_role("img")).to_have_attribute("aria-label", re.compile("latest 0.1749 %"))
    # What the values measure, in words beside the chart.
    expect(figure).to_contain_text("% of the machine's memory")
    # The legend: each host with its latest value and unit, not uPlot's "--".
    expect(figure.locator(".u-legend")).to_contain_text("0.1749 %")
    assert _legend(figure) == {"Time": "latest", "algo-1": "0.1749 %", "algo-2": "0.1749 %"}
    drawn = page.evaluate(DRAWN)["MemoryUtilization"]
    assert drawn["yTitle"] == "memory %"
    # Every tick its own value, with the unit: not "0.174" five times over.
    assert len(drawn["y"]) >= 2
    assert len(set(drawn["y"])) == len(drawn["y"]), drawn["y"]
    assert all(re.fullmatch(r"0\.17\d+ %", tick) for tick in drawn["y"]), drawn["y"]
    # The clock, in whole seconds or minutes: no ":27.500".
    assert drawn["xTitle"] == "Time (local)"
    assert all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", tick) for tick in drawn["x"]), drawn["x"]

    # The job's own metrics: no unit known, the metric's name on the axis, a value per host.
    page.get_by_role("tab", name="Metrics").click()
    loss = page.get_by_role("figure", name="loss")
    expect(loss.locator(".u-legend")).to_contain_text("0.625")
    assert _legend(loss) == {"Time": "latest", "algo-1": "0.5", "algo-2": "0.625"}
    assert page.evaluate(DRAWN)["loss"]["yTitle"] == "loss"

    # Pointing at a time shows the values then, and leaving the chart the latest again.
    box = loss.locator(".u-over").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
    expect(loss.locator(".u-legend")).not_to_contain_text("latest")
    page.mouse.move(0, 0)
    expect(loss.locator(".u-legend")).to_contain_text("latest")
