"""A job's page as tables: its configuration, its failure with the traceback as code, its
log downloaded or paged through past any cap, and a clone of it in the submit form."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.service.console.server import ConsoleServer

SignIn = Callable[[str], Page]
# Job-controlled text that would run as HTML if a page put it in as markup.
HOSTILE = '<img src=x onerror="window.pwned=1">'
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 3, in <module>\n'
    "    main()\n"
    f"ValueError: bad shape {HOSTILE}"
)


def test_the_configuration_reads_as_tables_and_a_failure_as_code(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    job = server.submit(
        "tabled",
        hyperparameters={"epochs": 3, "lr": 0.01, "note": HOSTILE},
        inputs={
            "train": {
                "uri": server.source.as_uri(),
                "input_mode": "FastFile",
                "distribution": "ShardedByS3Key",
            }
        },
        checkpoint_s3_uri=(server.source.parent / "ckpt").as_uri(),
        max_run=7200,
        distribution={"torch_distributed": {"enabled": True}},
        tags=[{"key": "team", "value": "vision"}],
    )
    server.failed(job, TRACEBACK)
    sign_in("alpha member")
    page.goto(server.url + "jobs/tabled#configuration")

    hyper = page.get_by_role("table", name="Hyperparameters")
    expect(hyper.get_by_role("row", name="epochs 3")).to_be_visible()
    expect(hyper.get_by_role("row", name="lr 0.01")).to_be_visible()
    expect(hyper.get_by_role("row").filter(has_text="note")).to_contain_text(HOSTILE)
    channels = page.get_by_role("table", name="Input channels")
    train = channels.get_by_role("row").filter(has_text="train")
    expect(train).to_contain_text(server.source.as_uri())
    expect(train).to_contain_text("FastFile")
    expect(train).to_contain_text("ShardedByS3Key")
    where = page.get_by_role("table", name="Output and checkpoints")
    expect(where.get_by_role("row").filter(has_text="Output path")).to_contain_text(
        job["spec"]["output_path"]
    )
    expect(where.get_by_role("row").filter(has_text="Checkpoints (S3 URI)")).to_contain_text(
        "/ckpt"
    )
    stopping = page.get_by_role("table", name="Resources and stopping condition")
    expect(stopping.get_by_role("row").filter(has_text="Max run time")).to_contain_text(
        "2h 0m (7200 s)"
    )
    expect(stopping.get_by_role("row").filter(has_text="Image")).to_contain_text("builtin")
    expect(stopping.get_by_role("row").filter(has_text="Distribution")).to_have_text(
        re.compile(r"^Distribution\s*torch_distributed$")
    )
    expect(stopping.get_by_role("row").filter(has_text="Billable time")).to_be_visible()
    expect(page.get_by_role("table", name="Tags")).to_contain_text("vision")
    # No raw spec full of nulls in view: the stored JSON waits behind its disclosure.
    expect(page.get_by_label("Job spec")).to_be_hidden()

    page.get_by_role("tab", name="Overview").click()
    failure = page.get_by_label("Failure reason")
    expect(failure).to_have_text(TRACEBACK)
    assert failure.evaluate("node => node.tagName") == "PRE"
    assert failure.evaluate("node => getComputedStyle(node).whiteSpace") == "pre"
    # Shown as text, never as markup: no element was made of it, and nothing ran.
    expect(page.locator("#job img")).to_have_count(0)
    assert page.evaluate("() => window.pwned") is None


def test_the_log_downloads_whole_or_by_host(
    page: Page, server: ConsoleServer, sign_in: SignIn, tmp_path: Path
) -> None:
    job = server.submit("two-hosts", instance_count=2)
    server.log(job, "from one", host="algo-1")
    server.log(job, "from two", host="algo-2")
    sign_in("alpha member")
    page.goto(server.url + "jobs/two-hosts#logs")
    logs = page.get_by_role("log", name="Log lines")
    expect(logs).to_contain_text("from two")

    with page.expect_download() as whole:
        page.get_by_role("link", name="Download the whole log").click()
    assert whole.value.suggested_filename == "two-hosts.log"
    lines = Path(whole.value.path()).read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["algo-1 from one", "algo-2 from two"]

    page.get_by_label("Log host").select_option("algo-2")
    expect(logs).not_to_contain_text("from one")
    with page.expect_download() as one:
        page.get_by_role("link", name="Download algo-2's log").click()
    assert one.value.suggested_filename == "two-hosts-algo-2.log"
    assert Path(one.value.path()).read_text().endswith(" algo-2 from two\n")


def test_a_long_log_is_paged_through_to_its_first_line(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    job = server.submit("long-log")
    server.log(job, *(f"line {n:05d}" for n in range(1, 6201)))
    sign_in("alpha member")
    page.goto(server.url + "jobs/long-log#logs")
    logs = page.get_by_role("log", name="Log lines")
    position = page.get_by_text(re.compile(r"^Lines \d"))
    # The whole log is read, page by page, before its last page shows: on a loaded machine
    # 6,200 lines take longer than expect()'s usual wait.
    expect(position).to_have_text("Lines 5,201\u20136,200 of 6,200", timeout=60_000)
    expect(logs.locator(".line")).to_have_count(1000)
    expect(logs.locator(".line").last).to_contain_text("line 06200")

    older = page.get_by_role("button", name="Older lines")
    for _ in range(6):
        older.click()
    expect(position).to_have_text("Lines 1\u20131,000 of 6,200")
    expect(logs.locator(".line").first).to_contain_text("line 00001")
    expect(older).to_be_disabled()

    # Lines printed while an older page is read wait for the reader, who catches up.
    server.log(job, "line 06201")
    expect(position).to_have_text("Lines 1\u20131,000 of 6,201")
    page.get_by_role("button", name="Newer lines").click()
    expect(position).to_have_text("Lines 1,001\u20132,000 of 6,201")
    page.get_by_role("button", name="Latest lines").click()
    expect(logs.locator(".line").last).to_contain_text("line 06201")

    # A search looks through every line, not only the page shown.
    page.get_by_label("Search").fill("line 00002")
    expect(position).to_have_text("Lines 1\u20131 of 1 matching of 6,201")
    expect(logs.locator(".line")).to_have_text(re.compile("line 00002"))


def test_clone_fills_the_submit_form_with_the_jobs_spec(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    server.submit(
        "to-clone",
        hyperparameters={"epochs": 7},
        inputs={"train": {"uri": server.source.as_uri()}},
    )
    sign_in("alpha member")
    page.goto(server.url + "jobs/to-clone")
    page.get_by_role("link", name="Clone").click()
    expect(page).to_have_url(re.compile(r"/runyard/submit\?clone=to-clone$"))
    expect(page.get_by_role("status")).to_have_text("Cloned from to-clone: give the copy a name.")
    expect(page.get_by_label("Name", exact=True)).to_have_value("")
    expect(page.get_by_label("Hyperparameter 1 name")).to_have_value("epochs")
    expect(page.get_by_label("Hyperparameter 1 value")).to_have_value("7")
    expect(page.get_by_label("Channel 1 URI")).to_have_value(server.source.as_uri())
    editor = page.get_by_label("Spec (YAML or JSON)")
    expect(editor).not_to_have_value(re.compile(r"^(name|image|output_path|backend):", re.M))

    page.get_by_label("Name", exact=True).fill("the-clone")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/runyard/jobs/the-clone$"))
    copy = server.call("admin", "GET", "v1/training-jobs/the-clone?project=alpha")
    original = server.call("admin", "GET", "v1/training-jobs/to-clone?project=alpha")
    for same in ("hyperparameters", "inputs", "output_path", "image", "instance_type"):
        assert copy["spec"][same] == original["spec"][same], same


def test_the_submit_form_offers_the_servers_types_and_edits_channels_and_hyperparameters(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    sign_in("alpha member")
    page.get_by_role("link", name="Submit").click()
    page.wait_for_load_state()
    types = page.get_by_label("Instance type")
    expect(types.locator("option")).to_have_text(
        [
            "local (local)",
            "local_gpu (local)",
            re.compile(r"^ml\.m5\.large \(local; 2 vCPU, 8 GiB\)$"),
        ]
    )
    types.select_option("ml.m5.large")
    page.get_by_label("Name", exact=True).fill("from-the-rows")
    page.get_by_label("Source URI").fill(server.source.as_uri())
    page.get_by_label("Distribution").select_option("torch_distributed")

    page.get_by_role("button", name="Add hyperparameter").click()
    page.get_by_label("Hyperparameter 1 name").fill("epochs")
    page.get_by_label("Hyperparameter 1 value").fill("5")
    page.get_by_role("button", name="Add hyperparameter").click()
    page.get_by_label("Hyperparameter 2 name").fill("optimizer")
    page.get_by_label("Hyperparameter 2 value").fill("adamw")
    page.get_by_role("button", name="Add hyperparameter").click()
    page.get_by_label("Hyperparameter 3 name").fill("dropped")
    page.get_by_role("button", name="Remove hyperparameter 3").click()
    page.get_by_role("button", name="Add channel").click()
    page.get_by_label("Channel 1 name").fill("train")
    page.get_by_label("Channel 1 URI").fill(server.source.as_uri())
    page.get_by_label("Channel 1 input mode").select_option("FastFile")
    page.get_by_label("Channel 1 distribution").select_option("ShardedByS3Key")

    editor = page.get_by_label("Spec (YAML or JSON)")
    expect(editor).to_have_value(re.compile(r"^  epochs: 5$", re.M))
    expect(editor).not_to_have_value(re.compile("dropped"))
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/runyard/jobs/from-the-rows$"))
    spec = server.call("admin", "GET", "v1/training-jobs/from-the-rows?project=alpha")["spec"]
    assert spec["instance_type"] == "ml.m5.large"
    assert spec["hyperparameters"] == {"epochs": 5, "optimizer": "adamw"}
    assert spec["distribution"]["torch_distributed"] == {"enabled": True}
    train = spec["inputs"]["train"]
    assert (train["uri"], train["input_mode"], train["distribution"]) == (
        server.source.as_uri(),
        "FastFile",
        "ShardedByS3Key",
    )


def test_the_job_page_says_how_its_image_differs_from_what_it_named(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    server.submit("pinned", framework_version="2.1", py_version="py310")
    sign_in("alpha member")
    page.goto(server.url + "jobs/pinned")
    expect(
        page.get_by_role("definition").filter(has_text="pytorch-training:2.1.0-cpu-py311")
    ).to_be_visible()
    expect(page.get_by_role("definition").filter(has_text="py310 was asked for")).to_contain_text(
        "is made for this server's Python"
    )
