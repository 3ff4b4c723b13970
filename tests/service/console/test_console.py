"""The console as people use it: sign in, the jobs, a job's page with its live logs and
charts, stopping, what a viewer may not do, and what another project may not see."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.service.console.server import LOSS, QUEUED_TYPE, ConsoleServer

SignIn = Callable[[str], Page]


def test_sign_in_and_out(page: Page, server: ConsoleServer, sign_in: SignIn) -> None:
    page.goto(server.url)
    expect(page).to_have_url(re.compile(r"/runyard/sign-in$"))
    page.get_by_label("API token").fill("ry_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")

    sign_in("alpha member")
    expect(page.get_by_text("mo (member in alpha)")).to_be_visible()
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["runyard_session"]["httpOnly"]
    assert cookies["runyard_session"]["path"] == "/runyard/"
    assert page.evaluate("() => Object.keys(localStorage).length") == 0

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/runyard/sign-in$"))
    assert "runyard_session" not in {c["name"] for c in page.context.cookies()}
    assert page.request.get(server.url + "v1/me").status == 401
    page.goto(server.url)
    expect(page).to_have_url(re.compile(r"/runyard/sign-in$"))


def test_job_list_is_newest_first_filters_pages_and_updates_live(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    for index in range(26):
        server.submit(f"list-{index:02d}")
    sign_in("alpha member")
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(25)
    first = rows.first
    expect(first.get_by_role("link")).to_have_text("list-25")
    expect(first).to_contain_text("InProgress")
    expect(first).to_contain_text("local \u00d7 1")
    expect(first.get_by_role("link")).to_have_attribute("href", "/runyard/jobs/list-25")
    count = page.locator("#jobs-count")
    expect(count).to_have_text("25 jobs on page 1 (1\u201325); more on the next page")

    page.get_by_role("button", name="Next page").click()
    expect(rows.first.get_by_role("link")).not_to_have_text("list-25")
    expect(count).to_have_text(re.compile(r"^\d+ jobs? on page 2 \(26(\u2013\d+)?\)$"))
    page.get_by_role("button", name="Previous page").click()
    expect(rows.first.get_by_role("link")).to_have_text("list-25")

    # Submitted while the page is open: it appears without a reload.
    server.submit("list-late")
    expect(rows.first.get_by_role("link")).to_have_text("list-late")

    page.get_by_label("Name contains").fill("list-0")
    expect(rows).to_have_count(10)
    page.get_by_label("Status").select_option("Completed")
    expect(rows).to_have_count(0)
    expect(page.get_by_text("No jobs match.")).to_be_visible()


def test_a_jobs_page_follows_its_logs_and_charts_its_metrics(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    job = server.submit(
        "charted", metric_definitions=LOSS, environment={"WANDB_API_KEY": "s3cret-value"}
    )
    server.log(job, "epoch 1", "loss=0.5")
    sign_in("alpha member")
    page.get_by_role("link", name="charted").click()
    expect(page.get_by_role("heading", name="Job charted")).to_be_visible()

    page.get_by_role("tab", name="Logs").click()
    logs = page.get_by_role("log", name="Log lines")
    expect(logs).to_contain_text("loss=0.5")
    expect(logs.locator("time").first).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d"))
    page.get_by_role("tab", name="Metrics").click()
    chart = page.get_by_role("img", name=re.compile("loss"))
    expect(chart).to_have_attribute("aria-label", re.compile(r"loss: 1 values, latest 0\.5"))
    expect(chart.locator("canvas")).to_have_count(1)  # drawn by the charting library

    # Posted after the page opened: followed live, and charted.
    server.log(job, "loss=0.25")
    expect(chart).to_have_attribute("aria-label", re.compile(r"loss: 2 values, latest 0\.25"))
    page.get_by_role("tab", name="Logs").click()
    expect(logs).to_contain_text("loss=0.25")

    page.get_by_label("Search").fill("epoch")
    expect(logs.get_by_text("epoch 1")).to_be_visible()
    expect(logs.get_by_text("loss=0.25")).to_be_hidden()

    page.get_by_role("tab", name="Configuration").click()
    page.get_by_text("The whole spec, as stored (JSON)").click()
    spec = page.get_by_label("Job spec")
    expect(spec).to_contain_text("WANDB_API_KEY")
    expect(spec).not_to_contain_text("s3cret-value")
    page.get_by_role("button", name="Show environment values").click()
    expect(spec).to_contain_text("s3cret-value")

    page.get_by_role("tab", name="Overview").click()
    expect(page.get_by_text("InProgress").first).to_be_visible()
    expect(page.get_by_role("listitem").filter(has_text="InProgress / Starting")).to_be_visible()
    # The image it runs on: the built-in one, as none was named.
    image = page.get_by_role("definition").filter(has=page.locator("code", has_text="builtin"))
    expect(image).to_have_count(1)

    # Once the job has stored its model, the page offers it.
    server.stored_model(job, b"weights")
    page.reload()
    with page.expect_download() as download:
        page.get_by_role("link", name="Download model").click()
    assert download.value.suggested_filename == "charted-model.tar.gz"
    assert Path(download.value.path()).read_bytes() == b"weights"


def test_a_model_stored_uncompressed_is_named_not_offered_for_download(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    job = server.submit("unpacked", output_compression="NONE")
    server.stored_model(job, b"weights")
    sign_in("alpha viewer")
    page.goto(server.url + "jobs/unpacked")
    stored = page.get_by_role("definition").filter(has_text="stored uncompressed")
    expect(stored.locator("code")).to_have_text(re.compile(r"/unpacked/output/model/$"))
    expect(page.get_by_role("link", name="Download model")).to_have_count(0)


def test_stop_asks_first(page: Page, server: ConsoleServer, sign_in: SignIn) -> None:
    server.submit("to-stop")
    sign_in("alpha member")
    page.goto(server.url + "jobs/to-stop")
    page.get_by_role("button", name="Stop", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Stop to-stop?")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert server.call("admin", "GET", "v1/training-jobs/to-stop?project=alpha")["status"] == (
        "InProgress"
    )

    page.get_by_role("button", name="Stop", exact=True).click()
    dialog.get_by_role("button", name="Stop job").click()
    expect(page.get_by_role("status")).to_have_text("Stop requested.")
    assert server.call("admin", "GET", "v1/training-jobs/to-stop?project=alpha")["status"] in (
        "Stopping",
        "Stopped",
    )
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_disabled()


def test_a_viewer_cannot_stop_or_interrupt(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    server.submit("spot-job", use_spot_instances=True, max_wait=90000)
    sign_in("alpha viewer")
    page.goto(server.url + "jobs/spot-job")
    expect(page.get_by_text("Viewers cannot stop or interrupt jobs.")).to_be_visible()
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_disabled()
    expect(page.get_by_role("button", name="Interrupt")).to_be_disabled()


def test_a_member_interrupts_a_spot_instance(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    job = server.submit("spot-rehearsal", use_spot_instances=True, max_wait=90000)
    server.launched(job)
    sign_in("alpha member")
    page.goto(server.url + "jobs/spot-rehearsal")
    expect(page.get_by_role("button", name="Interrupt")).to_be_enabled()
    page.get_by_label("Host to interrupt").select_option("algo-1")
    page.get_by_role("button", name="Interrupt").click()
    page.get_by_role("dialog").get_by_role("button", name="Interrupt").click()
    expect(page.get_by_role("status")).to_have_text("Interruption requested.")
    assert server.interruption_message(job) == "algo-1: interrupted from the console"


def test_another_projects_job_is_absent(page: Page, server: ConsoleServer, sign_in: SignIn) -> None:
    server.submit("alphas-own")
    server.submit("betas-own", project="beta")
    sign_in("beta member")
    expect(page.get_by_role("link", name="betas-own")).to_be_visible()
    expect(page.get_by_role("link", name="alphas-own")).to_have_count(0)
    page.goto(server.url + "jobs/alphas-own")
    expect(page.get_by_role("alert")).to_contain_text("Job not found")
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_hidden()


def test_submit_previews_the_plan_then_submits(
    page: Page, server: ConsoleServer, sign_in: SignIn, tmp_path: Path
) -> None:
    bundle = tmp_path / "source.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        tar.add(server.source / "train.py", arcname="train.py")
    sign_in("alpha member")
    page.get_by_role("link", name="Submit").click()
    page.wait_for_load_state()  # the page's script in place, as a person's eyes would wait
    page.get_by_label("Name", exact=True).fill("from-the-form")
    page.get_by_label("Source tarball (.tar.gz)").set_input_files(bundle)
    expect(page.get_by_role("status")).to_contain_text("Uploaded source.tar.gz")
    editor = page.get_by_label("Spec (YAML or JSON)")
    expect(editor).to_have_value(
        re.compile(r"^source_uri: file://\S+/_sources/\S+\.tar\.gz$", re.M)
    )
    expect(editor).to_have_value(re.compile(r"^name: from-the-form$", re.M))

    page.get_by_role("button", name="Preview (dry run)").click()
    # The job as it would be stored first; the backend's plan in its own tab.
    resolved = page.get_by_label("Resolved job")
    expect(resolved).to_contain_text("entry_point: train.py")
    expect(resolved).to_contain_text("max_run: 86400")
    expect(resolved).to_contain_text("- algo-1")
    expect(page.get_by_text("Job from-the-form on the local backend")).to_be_visible()
    plan = page.get_by_label("Rendered plan")
    expect(plan).to_be_hidden()
    page.get_by_role("tab", name="Plan").click()
    expect(plan).to_contain_text("RUNYARD_JOB_TOKEN")
    expect(resolved).to_be_hidden()
    page.get_by_role("tab", name="Plan").press("ArrowLeft")
    expect(resolved).to_be_visible()
    expect(page.get_by_role("tab", name="Job")).to_be_focused()
    assert server.call("admin", "GET", "v1/training-jobs?name_prefix=from-the")["items"] == []

    editor.fill("{not yaml: [")
    page.get_by_role("button", name="Submit job").click()
    expect(page.get_by_role("alert")).to_contain_text("does not parse")
    editor.fill(
        f'{{"name": "from-the-editor", "entry_point": "train.py",'
        f' "source_uri": "{server.source.as_uri()}", "instance_type": "local"}}'
    )
    expect(page.get_by_label("Name", exact=True)).to_have_value("from-the-editor")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/runyard/jobs/from-the-editor$"))
    expect(page.get_by_role("heading", name="Job from-the-editor")).to_be_visible()


def test_capacity_lists_each_instance_types_jobs(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    server.submit("holding-capacity")
    sign_in("alpha member")
    page.get_by_role("link", name="Capacity", exact=True).click()
    line = page.get_by_role("region", name="Instance type local")
    expect(line.get_by_role("link", name="holding-capacity")).to_be_visible()


def test_a_waiting_job_shows_its_place_in_line(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    for name in ("line-first", "line-second", "line-third"):
        server.submit(name, instance_type=QUEUED_TYPE)
    sign_in("alpha member")
    page.get_by_role("link", name="Capacity", exact=True).click()
    line = page.get_by_role("region", name=f"Instance type {QUEUED_TYPE}")
    expect(line.get_by_role("heading", name="Waiting in order: 3 jobs")).to_be_visible()
    line.get_by_role("link", name="line-third").click()
    expect(page.get_by_role("heading", name="Job line-third")).to_be_visible()
    expect(page.get_by_text(f"3 of 3 waiting for {QUEUED_TYPE}")).to_be_visible()
