"""The jobs list searched, sorted and filtered by time and tag, read on a phone's width, and
2 to 4 of its jobs compared side by side."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.service.console.server import LOSS, ConsoleServer, open_page

SignIn = Callable[[str], Page]


def test_the_list_searches_sorts_and_filters_by_time_and_tag(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    server.submit("sweep-alpha", tags=[{"key": "sweep", "value": "7"}])
    server.submit("sweep-beta", tags=[{"key": "sweep", "value": "8"}])
    server.submit("other-job")
    sign_in("alpha member")
    rows = page.locator("#jobs tbody tr")
    names = rows.get_by_role("link")

    page.get_by_label("Name contains").fill("SWEEP")
    expect(names).to_have_text(["sweep-beta", "sweep-alpha"])
    page.get_by_label("Sort by").select_option("Name, A to Z")
    expect(names).to_have_text(["sweep-alpha", "sweep-beta"])
    page.get_by_label("Tag (key or key=value)").fill("sweep=8")
    expect(names).to_have_text(["sweep-beta"])
    page.get_by_label("Tag (key or key=value)").fill("")
    expect(names).to_have_text(["sweep-alpha", "sweep-beta"])

    # Every job here was created just now: none before 2020, all after it.
    page.get_by_label("Created before").fill("2020-01-01T00:00")
    expect(rows).to_have_count(0)
    expect(page.get_by_text("No jobs match.")).to_be_visible()
    page.get_by_label("Created before").fill("")
    page.get_by_label("Created after").fill("2020-01-01T00:00")
    expect(names).to_have_text(["sweep-alpha", "sweep-beta"])


def test_the_lists_headings_sort_it_and_it_counts_its_jobs(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    for name in ("hdr-b", "hdr-a", "hdr-c"):
        server.submit(name)
    sign_in("alpha member")
    names = page.locator("#jobs tbody tr").get_by_role("link")
    page.get_by_label("Name contains").fill("hdr-")
    expect(names).to_have_text(["hdr-c", "hdr-a", "hdr-b"])
    expect(page.get_by_text("3 jobs", exact=True)).to_be_visible()

    by_name = page.get_by_role("columnheader", name="Name")
    created = page.get_by_role("columnheader", name="Created")
    # Newest first, said by the heading it sorts by, and by no other.
    expect(created).to_have_attribute("aria-sort", "descending")
    expect(by_name).not_to_have_attribute("aria-sort", re.compile("."))
    # Only what the API can order by is a button.
    for plain in ("Status", "Secondary status", "Instances", "Duration"):
        header = page.get_by_role("columnheader", name=plain, exact=True)
        expect(header.get_by_role("button")).to_have_count(0)
        expect(header).not_to_have_attribute("aria-sort", re.compile("."))

    by_name.get_by_role("button").click()
    expect(names).to_have_text(["hdr-a", "hdr-b", "hdr-c"])
    expect(by_name).to_have_attribute("aria-sort", "ascending")
    expect(created).not_to_have_attribute("aria-sort", re.compile("."))
    expect(page.get_by_label("Sort by")).to_have_value("name")
    by_name.get_by_role("button").click()
    expect(names).to_have_text(["hdr-c", "hdr-b", "hdr-a"])
    expect(by_name).to_have_attribute("aria-sort", "descending")
    created.get_by_role("button").click()
    expect(names).to_have_text(["hdr-c", "hdr-a", "hdr-b"])
    expect(created).to_have_attribute("aria-sort", "descending")
    created.get_by_role("button").click()
    expect(names).to_have_text(["hdr-b", "hdr-a", "hdr-c"])
    expect(created).to_have_attribute("aria-sort", "ascending")
    # The choice under the filters moves the headings too.
    page.get_by_label("Sort by").select_option("Name, Z to A")
    expect(by_name).to_have_attribute("aria-sort", "descending")

    page.get_by_label("Name contains").fill("hdr-a")
    expect(page.get_by_text("1 job", exact=True)).to_be_visible()


def test_two_to_four_jobs_compare_side_by_side(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    runs = {}
    for name, lr, losses in [("cmp-a", 0.1, (0.9, 0.5)), ("cmp-b", 0.01, (0.8, 0.3))]:
        runs[name] = server.submit(
            name, hyperparameters={"lr": lr, "epochs": 3}, metric_definitions=LOSS
        )
        server.log(runs[name], *(f"loss={value}" for value in losses))
    for name in ("cmp-c", "cmp-d", "cmp-e"):
        server.submit(name)
    sign_in("alpha member")
    page.get_by_label("Name contains").fill("cmp-")
    compare = page.get_by_role("button", name="Compare selected jobs")
    page.get_by_label("Select cmp-a to compare").check()
    expect(compare).to_be_disabled()
    for name in ("cmp-b", "cmp-c", "cmp-d", "cmp-e"):
        page.get_by_label(f"Select {name} to compare").check()
    expect(compare).to_be_disabled()
    expect(page.get_by_text("5 selected: compare at most 4.")).to_be_visible()
    for name in ("cmp-c", "cmp-d", "cmp-e"):
        page.get_by_label(f"Select {name} to compare").uncheck()
    # Kept across the list's refreshes.
    page.wait_for_timeout(3500)
    expect(page.get_by_label("Select cmp-a to compare")).to_be_checked()
    compare.click()

    expect(page).to_have_url(re.compile(r"/runyard/compare\?job=cmp-(a|b)&job=cmp-(a|b)$"))
    hyper = page.get_by_role("table", name="Hyperparameters")
    lr = hyper.get_by_role("row").filter(has_text="lr")
    expect(lr).to_have_class("differs")
    expect(lr).to_contain_text("differs")
    expect(lr).to_contain_text("0.1")
    expect(lr).to_contain_text("0.01")
    expect(hyper.get_by_role("row").filter(has_text="epochs")).not_to_have_class("differs")
    # The jobs still run: their latest values, not final ones.
    finals = page.get_by_role("table", name="Latest metric values")
    expect(finals.get_by_role("row").filter(has_text="loss")).to_contain_text("0.5")

    chart = page.get_by_role("img", name=re.compile("metric loss"))
    expect(chart).to_have_attribute("aria-label", re.compile(r"cmp-a 0\.5"))
    expect(chart).to_have_attribute("aria-label", re.compile(r"cmp-b 0\.3"))
    expect(chart.locator("canvas")).to_have_count(1)
    page.get_by_role("link", name="cmp-b").click()
    expect(page.get_by_role("heading", name="Job cmp-b")).to_be_visible()


def test_compare_needs_two_to_four_jobs(page: Page, server: ConsoleServer, sign_in: SignIn) -> None:
    sign_in("alpha member")
    page.goto(server.url + "compare?job=only-one")
    expect(page.get_by_role("alert")).to_have_text(
        "Compare takes 2 to 4 jobs: select them on the jobs list."
    )


@pytest.fixture
def phone(browser: Browser, server: ConsoleServer) -> Iterator[Page]:
    yield from open_page(browser, viewport={"width": 390, "height": 844}, is_mobile=True)


def test_the_list_reads_on_a_phone(phone: Page, server: ConsoleServer) -> None:
    server.submit("a-rather-long-job-name-for-a-narrow-screen-0001", instance_count=2)
    phone.goto(server.url + "sign-in")
    phone.get_by_label("API token").fill(server.tokens["alpha member"])
    phone.get_by_role("button", name="Sign in").click()
    link = phone.get_by_role("link", name="a-rather-long-job-name-for-a-narrow-screen-0001")
    expect(link).to_be_visible()
    # Nothing is wider than the screen: no sideways scrolling to read a row.
    assert phone.evaluate("() => document.documentElement.scrollWidth") <= 390
    row = phone.locator("#jobs tbody tr").filter(has=link)
    box = row.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= 390
    # Each value comes with what it is.
    status = row.locator("td[data-label=Status]")
    expect(status).to_be_visible()
    assert "Status" in status.evaluate("node => getComputedStyle(node, '::before').content")
    expect(row).to_contain_text("InProgress")
