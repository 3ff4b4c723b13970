"""A job's page in tabs (WAI-ARIA's tabs pattern): Overview first, with how the job stands,
why it failed and its metric values before anything else; Logs, Metrics, Instances and
Configuration a click (or an arrow key) away, each at an address of its own. And words
that fit the job's state: latest values while it runs, final ones once it ended, and why
it has no model."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.service.console.server import LOSS, QUEUED_TYPE, ConsoleServer

SignIn = Callable[[str], Page]
TABS = ["Overview", "Logs", "Metrics", "Instances", "Configuration"]
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 3, in <module>\n'
    "ValueError: the batch has 3 dimensions, the model takes 4"
)


def _selected(page: Page, name: str) -> None:
    """``name`` is the one tab selected (and in the Tab order), its panel the one shown."""
    for tab in TABS:
        chosen = tab == name
        element = page.get_by_role("tab", name=tab)
        expect(element).to_have_attribute("aria-selected", "true" if chosen else "false")
        expect(element).to_have_attribute("tabindex", "0" if chosen else "-1")
        panel = page.locator(f"#{element.get_attribute('aria-controls')}")
        if chosen:
            expect(panel).to_be_visible()
        else:
            expect(panel).to_be_hidden()


def test_the_job_page_opens_on_its_overview_and_each_tab_has_an_address(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    job = server.submit(
        "tabbed",
        metric_definitions=LOSS,
        hyperparameters={f"option_{n:02d}": n for n in range(30)},
        inputs={"train": {"uri": server.source.as_uri()}},
    )
    server.log(job, *(f"step {n} loss={1 / n:.3f}" for n in range(1, 40)))
    sign_in("alpha member")
    page.goto(server.url + "jobs/tabbed")

    expect(page.get_by_role("tablist", name="The job's pages").get_by_role("tab")).to_have_text(
        TABS
    )
    _selected(page, "Overview")
    # First on the page: where the job stands and its metric values; the thirty
    # hyperparameters wait on their own tab.
    overview = page.get_by_role("tabpanel", name="Overview")
    expect(overview.get_by_role("definition").first).to_have_text("InProgress")
    latest = overview.get_by_role("table", name="Latest metric values")
    expect(latest.get_by_role("row").filter(has_text="loss")).to_contain_text("0.026")
    box = latest.bounding_box()
    assert box is not None
    assert box["y"] + box["height"] < 900, box
    expect(page.get_by_role("table", name="Hyperparameters")).to_be_hidden()

    # The log a click away, at the top of the page (it was 1,500 px down, under the tables).
    page.get_by_role("tab", name="Logs").click()
    _selected(page, "Logs")
    expect(page).to_have_url(re.compile(r"/jobs/tabbed#logs$"))
    logs = page.get_by_role("log", name="Log lines")
    expect(logs).to_contain_text("step 39")
    box = logs.bounding_box()
    assert box is not None
    assert box["y"] < 400, box

    # The keys of the pattern: arrows move and select (round the ends), Home and End.
    page.get_by_role("tab", name="Logs").press("ArrowRight")
    _selected(page, "Metrics")
    expect(page.get_by_role("tab", name="Metrics")).to_be_focused()
    expect(page).to_have_url(re.compile(r"#metrics$"))
    page.keyboard.press("End")
    _selected(page, "Configuration")
    expect(page.get_by_role("table", name="Hyperparameters")).to_contain_text("option_29")
    page.keyboard.press("ArrowRight")
    _selected(page, "Overview")
    page.keyboard.press("ArrowLeft")
    _selected(page, "Configuration")
    page.keyboard.press("Home")
    _selected(page, "Overview")
    expect(page.get_by_role("tab", name="Overview")).to_be_focused()
    # Tab from the selected tab goes into its panel, not to the next tab.
    page.keyboard.press("Tab")
    expect(page.get_by_role("tabpanel", name="Overview")).to_be_focused()

    # A link to a tab opens it, and so does a reload.
    page.goto(server.url + "jobs/tabbed#instances")
    _selected(page, "Instances")
    expect(page.get_by_text("No instance has reported yet")).to_be_visible()
    page.reload()
    _selected(page, "Instances")
    page.goto(server.url + "jobs/tabbed#no-such-tab")
    _selected(page, "Overview")


def test_the_words_fit_the_jobs_state(page: Page, server: ConsoleServer, sign_in: SignIn) -> None:
    job = server.submit("worded", metric_definitions=LOSS)
    server.log(job, "loss=0.5")
    sign_in("alpha member")
    page.goto(server.url + "jobs/worded")
    model = page.get_by_role("definition").filter(has_text=re.compile("^None"))

    # Running: the values so far, and a model still to come.
    expect(page.get_by_role("heading", name="Latest metric values")).to_be_visible()
    expect(page.get_by_role("table", name="Latest metric values")).to_contain_text("0.5")
    expect(page.get_by_role("term").filter(has_text="Running for")).to_be_visible()
    expect(model).to_have_text("None yet: it is stored when the script ends successfully.")

    # Failed: the values it ended with, and why there is no model.
    server.failed(job, TRACEBACK)
    page.reload()
    expect(page.get_by_role("heading", name="Final metric values")).to_be_visible()
    expect(page.get_by_role("table", name="Final metric values")).to_contain_text("0.5")
    expect(page.get_by_role("heading", name="Latest metric values")).to_have_count(0)
    expect(page.get_by_role("term").filter(has_text="Ran for")).to_be_visible()
    expect(model).to_have_text(
        "None was stored: a model is stored only when the script succeeds, and this job "
        "failed (ValueError: the batch has 3 dimensions, the model takes 4)."
    )

    # Two jobs compared while one still runs: their latest values, not final ones.
    server.submit("worded-2", metric_definitions=LOSS)
    page.goto(server.url + "compare?job=worded&job=worded-2")
    expect(page.get_by_role("table", name="Latest metric values")).to_contain_text("0.5")


def test_capacity_says_how_many_instances_are_in_use(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    held = server.submit("holding-one", instance_type=QUEUED_TYPE)
    server.launched(held)
    server.submit("unlimited", instance_count=2)
    sign_in("alpha member")
    page.get_by_role("link", name="Capacity", exact=True).click()
    # A type without a limit says so, instead of "4 of no limit instances in use".
    unlimited = page.get_by_role("region", name="Instance type local")
    expect(unlimited.get_by_role("heading", level=3).first).to_have_text(
        re.compile(r"^Running: \d+ instances? in use \(no limit\)$")
    )
    expect(unlimited.get_by_role("listitem").filter(has_text="unlimited")).to_contain_text(
        "2 instances"
    )
    limited = page.get_by_role("region", name=f"Instance type {QUEUED_TYPE}")
    expect(limited.get_by_role("heading", level=3).first).to_have_text(
        "Running: 1 of 1 instance in use"
    )
    expect(limited.get_by_role("listitem").filter(has_text="holding-one")).to_contain_text(
        "1 instance"
    )
