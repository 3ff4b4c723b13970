"""The console's tuning pages: the list reached from the navigation, with each tuning job's
trials and best objective; a tuning job's trials best first by its objective type, the
order turned around or by number with the headings, the best trial marked, and a chart of
the objective over the trials.

No worker runs here: the tuner's passes run in the test, and the trials' training jobs end
as the reconciler would end them, each with its final loss."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Page, expect

from service.tuning import tuner
from tests.service.console.conftest import Shoot
from tests.service.console.server import LOSS, ConsoleServer
from tests.service.tuning.tuning import end_job

SignIn = Callable[[str], Page]


def _tuning_job(server: ConsoleServer, name: str, objective_type: str) -> dict[str, Any]:
    """A tuning job of alpha's whose trials 1 to 3 ended with losses 0.5, 0.25 and 0.75,
    and whose fourth trial still runs."""
    spec = {
        "name": name,
        "strategy": "Random",
        "objective": {"type": objective_type, "metric_name": "loss"},
        "resource_limits": {"max_number_of_training_jobs": 4, "max_parallel_training_jobs": 2},
        "parameter_ranges": {
            "continuous": [
                {"name": "lr", "min_value": 0.0001, "max_value": 0.1, "scaling_type": "Logarithmic"}
            ],
        },
        "random_seed": 7,
        "training_job": {
            "entry_point": "train.py",
            "source_uri": server.source.as_uri(),
            "instance_type": "local",
            "instance_count": 1,
            "metric_definitions": LOSS,
        },
    }
    created: dict[str, Any] = server.call(
        "admin", "POST", "v1/tuning-jobs", params={"project": "alpha"}, json=spec
    )
    losses = {1: 0.5, 2: 0.25, 3: 0.75}
    for _ in range(2):  # trials 1 and 2, then (once they ended) 3 and 4
        tuner.advance(server.settings, created["id"])
        described = server.call("admin", "GET", f"v1/tuning-jobs/{name}?project=alpha")
        for trial in described["trials"]:
            if trial["status"] == "InProgress" and trial["number"] in losses:
                end_job(server.settings, trial["name"], loss=losses[trial["number"]])
    tuner.advance(server.settings, created["id"])
    return created


def _numbers(page: Page) -> Any:
    return page.locator("#trials tbody tr td:first-child")


def test_the_list_shows_each_tuning_jobs_trials_and_best_and_leads_to_its_page(
    page: Page, server: ConsoleServer, sign_in: SignIn, screenshot: Shoot
) -> None:
    _tuning_job(server, "tune-listed", "Minimize")
    sign_in("alpha member")
    page.get_by_role("navigation", name="Console").get_by_role("link", name="Tuning").click()
    expect(page.get_by_role("heading", name="Tuning jobs")).to_be_visible()
    row = page.locator("#tuning-jobs tbody tr", has_text="tune-listed")
    expect(row.locator("td")).to_have_text(
        ["tune-listed", "InProgress", "Random", "Minimize loss", "3/4", "0.25", re.compile(".")]
    )
    screenshot(page, "console-tuning-jobs")
    row.get_by_role("link", name="tune-listed").click()
    expect(page.get_by_role("heading", name="Tuning job tune-listed")).to_be_visible()


def test_a_minimized_objectives_trials_are_lowest_first_the_best_marked_and_charted(
    page: Page, server: ConsoleServer, sign_in: SignIn, screenshot: Shoot
) -> None:
    _tuning_job(server, "tune-min", "Minimize")
    sign_in("alpha member")
    page.goto(server.url + "tuning-jobs/tune-min")
    expect(page.get_by_role("heading", name="Tuning job tune-min")).to_be_visible()

    # Lowest loss first; the trial still running, with none, after.
    expect(_numbers(page)).to_have_text(["2", "1", "3", "4"])
    objective = page.get_by_role("columnheader", name=re.compile("loss"))
    expect(objective).to_have_attribute("aria-sort", "ascending")
    best = page.locator("#trials tbody tr.best")
    expect(best).to_have_count(1)
    expect(best.locator("td").first).to_have_text("2")
    expect(best.locator(".objective")).to_have_text("0.25 best")
    facts = page.get_by_label("Tuning job", exact=True)
    best_fact = re.compile(r"Best trial\s*tune-min-002-[0-9a-f]{8} \(loss 0\.25\)")
    expect(facts).to_contain_text(best_fact)
    expect(facts).to_contain_text("4 started, 3 ended of 4, at most 2 at once")

    # The heading turns the order around: worst first, the trial without a value still last.
    objective.get_by_role("button").click()
    expect(_numbers(page)).to_have_text(["3", "1", "2", "4"])
    expect(objective).to_have_attribute("aria-sort", "descending")
    page.get_by_role("columnheader", name="#").get_by_role("button").click()
    expect(_numbers(page)).to_have_text(["1", "2", "3", "4"])
    expect(objective).not_to_have_attribute("aria-sort", re.compile("."))

    chart = page.get_by_role("img", name=re.compile("Chart of the objective loss"))
    expect(chart).to_have_attribute(
        "aria-label", "Chart of the objective loss over 4 trials, 3 with a value: best 0.25"
    )
    expect(chart.locator("canvas")).to_have_count(1)  # drawn by the charting library
    expect(chart.locator(".u-legend")).to_contain_text("best so far")
    objective.get_by_role("button").click()  # best first again, as the page opens
    expect(_numbers(page)).to_have_text(["2", "1", "3", "4"])
    screenshot(page, "console-tuning-job")


def test_a_maximized_objectives_trials_are_highest_first(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    _tuning_job(server, "tune-max", "Maximize")
    sign_in("alpha member")
    page.goto(server.url + "tuning-jobs/tune-max")
    expect(_numbers(page)).to_have_text(["3", "1", "2", "4"])
    expect(page.get_by_role("columnheader", name=re.compile("loss"))).to_have_attribute(
        "aria-sort", "descending"
    )
    expect(page.locator("#trials tbody tr.best td").first).to_have_text("3")
    chart = page.get_by_role("img", name=re.compile("Chart of the objective loss"))
    expect(chart).to_have_attribute("aria-label", re.compile(r"best 0\.75$"))


def test_stop_asks_first_then_the_tuning_job_is_stopping_then_stopped(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    created = _tuning_job(server, "tune-stop", "Minimize")  # its fourth trial runs
    sign_in("alpha member")
    page.goto(server.url + "tuning-jobs/tune-stop")
    stop = page.get_by_role("button", name="Stop", exact=True)
    stop.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Stop tune-stop?")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert _status(server, "tune-stop") == "InProgress"

    stop.click()
    dialog.get_by_role("button", name="Stop tuning job").click()
    expect(page.get_by_role("status")).to_have_text("Stop requested.")
    assert _status(server, "tune-stop") == "Stopping"
    facts = page.get_by_label("Tuning job", exact=True)
    expect(facts).to_contain_text(re.compile(r"Status\s*Stopping"))
    expect(stop).to_be_hidden()  # it is being stopped already

    # The tuner stops the running trial; once its training job has ended, it is Stopped.
    tuner.advance(server.settings, created["id"])
    running = server.call("admin", "GET", "v1/tuning-jobs/tune-stop?project=alpha")["trials"][3]
    assert server.call("admin", "GET", f"v1/training-jobs/{running['name']}?project=alpha")[
        "status"
    ] in ("Stopping", "Stopped")
    end_job(server.settings, running["name"], "Stopped")
    tuner.advance(server.settings, created["id"])
    expect(facts).to_contain_text(re.compile(r"Status\s*Stopped"))
    expect(stop).to_be_hidden()


def test_a_viewer_cannot_stop_a_tuning_job(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    _tuning_job(server, "tune-viewed", "Minimize")
    sign_in("alpha viewer")
    page.goto(server.url + "tuning-jobs/tune-viewed")
    expect(page.get_by_text("Viewers cannot stop tuning jobs.")).to_be_visible()
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_disabled()


def _status(server: ConsoleServer, name: str) -> str:
    return str(server.call("admin", "GET", f"v1/tuning-jobs/{name}?project=alpha")["status"])


def test_a_warm_start_shows_its_parents_and_the_overall_best_trial(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    parent = _tuning_job(server, "tune-parent", "Minimize")
    described = server.call("admin", "GET", "v1/tuning-jobs/tune-parent?project=alpha")
    (running,) = [t for t in described["trials"] if t["status"] == "InProgress"]
    end_job(server.settings, running["name"], loss=0.6)
    tuner.advance(server.settings, parent["id"])
    spec = {
        **parent["spec"],
        "name": "tune-child",
        "warm_start_config": {
            "warm_start_type": "IdenticalDataAndAlgorithm",
            "parent_tuning_jobs": ["tune-parent"],
        },
    }
    server.call("admin", "POST", "v1/tuning-jobs", params={"project": "alpha"}, json=spec)
    sign_in("alpha member")
    page.goto(server.url + "tuning-jobs/tune-child")
    facts = page.get_by_label("Tuning job", exact=True)
    expect(facts).to_contain_text("Warm startIdenticalDataAndAlgorithm from tune-parent")
    expect(facts).to_contain_text(
        re.compile(r"Overall best\s*tune-parent-002-[0-9a-f]{8} of tune-parent \(loss 0\.25\)")
    )
    facts.get_by_role("link", name="tune-parent", exact=True).click()
    expect(page.get_by_role("heading", name="Tuning job tune-parent")).to_be_visible()


def test_several_definitions_show_each_trials_definition_and_the_best_ones_metric(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    def training(metric: str) -> dict[str, Any]:
        return {
            "entry_point": "train.py",
            "source_uri": server.source.as_uri(),
            "instance_type": "local",
            "instance_count": 1,
            "metric_definitions": [{"name": metric, "regex": r"loss=([0-9.]+)"}],
        }

    ranges = {"integer": [{"name": "depth", "min_value": 1, "max_value": 9}]}
    spec = {
        "name": "tune-two",
        "strategy": "Random",
        "resource_limits": {"max_number_of_training_jobs": 4, "max_parallel_training_jobs": 4},
        "random_seed": 7,
        "training_job_definitions": [
            {
                "definition_name": "small",
                "objective": {"type": "Minimize", "metric_name": "loss"},
                "parameter_ranges": ranges,
                "training_job": training("loss"),
            },
            {
                "definition_name": "large",
                "objective": {"type": "Minimize", "metric_name": "error"},
                "parameter_ranges": ranges,
                "training_job": training("error"),
            },
        ],
    }
    created = server.call("admin", "POST", "v1/tuning-jobs", params={"project": "alpha"}, json=spec)
    tuner.advance(server.settings, created["id"])
    described = server.call("admin", "GET", "v1/tuning-jobs/tune-two?project=alpha")
    trials = described["trials"]
    best = trials[0]
    metric = "loss" if best["definition"] == "small" else "error"
    end_job(server.settings, best["name"], loss=0.125, metric=metric)
    tuner.advance(server.settings, created["id"])

    sign_in("alpha member")
    page.goto(server.url + "tuning-jobs/tune-two")
    facts = page.get_by_label("Tuning job", exact=True)
    expect(facts).to_contain_text("Minimize loss (small), error (large)")
    expect(facts).to_contain_text(re.compile(rf"Best trial\s*{best['name']} \({metric} 0\.125\)"))
    for trial in trials:
        row = page.locator(f"#trials tbody tr[data-trial='{trial['number']}']")
        expect(row.locator("td").nth(1)).to_have_text(f"{trial['name']} {trial['definition']}")
    chart = page.get_by_role("img", name=re.compile("Chart of the objective"))
    expect(chart).to_have_attribute("aria-label", re.compile(r"best 0\.125$"))
    # The list's row says each definition's metric too, from the listing alone.
    page.goto(server.url + "tuning-jobs")
    row = page.locator("#tuning-jobs tbody tr", has_text="tune-two")
    expect(row.locator("td").nth(3)).to_have_text("Minimize loss (small), error (large)")
