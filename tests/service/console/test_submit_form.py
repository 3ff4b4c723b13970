"""The submit form's every part of an estimator's spec (output, stopping condition, spot,
checkpoints, metric definitions, tags, environment), kept in step with the editor, and a
refused field named as the form names it."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.service.console.server import ConsoleServer

SignIn = Callable[[str], Page]


def _open_form(page: Page, server: ConsoleServer, sign_in: SignIn, name: str) -> None:
    sign_in("alpha member")
    page.get_by_role("link", name="Submit").click()
    page.wait_for_load_state()
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Source URI").fill(server.source.as_uri())


def test_the_form_fills_every_part_of_the_spec(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    _open_form(page, server, sign_in, "every-field")
    # Both within what alpha may write (the server's grant).
    output = (server.source.parent / "ckpt" / "output").as_uri()
    checkpoints = (server.source.parent / "ckpt" / "every-field").as_uri()
    page.get_by_label("Output path").fill(output)
    page.get_by_label("Checkpoint S3 URI").fill(checkpoints)
    page.get_by_label("Checkpoint local path").fill("/opt/ml/ckpt")
    page.get_by_label("Max run (seconds)").fill("3600")
    page.get_by_label("Use spot instances").check()
    page.get_by_label("Max wait (seconds", exact=False).fill("7200")
    page.get_by_role("button", name="Add metric").click()
    page.get_by_label("Metric 1 name").fill("loss")
    page.get_by_label("Metric 1 regex").fill(r"loss=([0-9.]+)")
    page.get_by_role("button", name="Add metric").click()
    page.get_by_label("Metric 2 name").fill("dropped")
    page.get_by_role("button", name="Remove metric 2").click()
    page.get_by_role("button", name="Add tag").click()
    page.get_by_label("Tag 1 key").fill("team")
    page.get_by_label("Tag 1 value").fill("vision")
    page.get_by_role("button", name="Add environment variable").click()
    page.get_by_label("Variable 1 name").fill("NCCL_DEBUG")
    page.get_by_label("Variable 1 value").fill("INFO")

    # The editor shows what the form set, as the API takes it.
    editor = page.get_by_label("Spec (YAML or JSON)")
    expect(editor).to_have_value(re.compile(r"^use_spot_instances: true$", re.M))
    expect(editor).to_have_value(re.compile(r"^max_wait: 7200$", re.M))
    expect(editor).to_have_value(re.compile(r"^  - key: team\n    value: vision$", re.M))
    expect(editor).to_have_value(re.compile(r"^  NCCL_DEBUG: INFO$", re.M))
    expect(editor).not_to_have_value(re.compile("dropped"))
    # Unticked, the box leaves its key out (for the server's default).
    page.get_by_label("Use spot instances").uncheck()
    expect(editor).not_to_have_value(re.compile("use_spot_instances"))
    page.get_by_label("Use spot instances").check()

    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/runyard/jobs/every-field$"))
    spec = server.call("admin", "GET", "v1/training-jobs/every-field?project=alpha")["spec"]
    assert spec["output_path"] == output
    assert spec["checkpoint_s3_uri"] == checkpoints
    assert spec["checkpoint_local_path"] == "/opt/ml/ckpt"
    assert (spec["max_run"], spec["use_spot_instances"], spec["max_wait"]) == (3600, True, 7200)
    assert spec["metric_definitions"] == [{"name": "loss", "regex": r"loss=([0-9.]+)"}]
    assert spec["tags"] == [{"key": "team", "value": "vision"}]
    assert spec["environment"] == {"NCCL_DEBUG": "INFO"}


def test_the_editor_fills_the_forms_rows(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    _open_form(page, server, sign_in, "from-yaml")
    editor = page.get_by_label("Spec (YAML or JSON)")
    editor.fill(
        "name: from-yaml\n"
        "entry_point: train.py\n"
        f"source_uri: {server.source.as_uri()}\n"
        "instance_type: local\n"
        "max_run: 600\n"
        "use_spot_instances: true\n"
        "max_wait: 900\n"
        "metric_definitions:\n"
        "  - {name: acc, regex: 'acc=([0-9.]+)'}\n"
        # Tags as a mapping, as a spec file may give them.
        "tags: {team: vision, stage: dev}\n"
        "environment: {OMP_NUM_THREADS: '4'}\n"
    )
    expect(page.get_by_label("Max run (seconds)")).to_have_value("600")
    expect(page.get_by_label("Use spot instances")).to_be_checked()
    expect(page.get_by_label("Metric 1 regex")).to_have_value("acc=([0-9.]+)")
    expect(page.get_by_label("Tag 2 key")).to_have_value("stage")
    expect(page.get_by_label("Tag 2 value")).to_have_value("dev")
    expect(page.get_by_label("Variable 1 value")).to_have_value("4")


def test_a_refused_field_is_named_by_its_label(
    page: Page, server: ConsoleServer, sign_in: SignIn
) -> None:
    _open_form(page, server, sign_in, "refused")
    error = page.get_by_role("alert")

    page.get_by_label("Entry point").fill("")
    page.get_by_role("button", name="Preview (dry run)").click()
    expect(error).to_have_text("Entry point: Field required")
    page.get_by_label("Entry point").fill("train.py")

    # Spot without the budget it needs.
    page.get_by_label("Use spot instances").check()
    page.get_by_role("button", name="Submit job").click()
    expect(error).to_have_text(re.compile(r"^Max wait: .*required with use_spot_instances"))
    page.get_by_label("Use spot instances").uncheck()

    # A row's field: the part of the form, the row and the input.
    page.get_by_role("button", name="Add metric").click()
    page.get_by_label("Metric 1 name").fill("loss")
    page.get_by_label("Metric 1 regex").fill("loss=(")
    page.get_by_role("button", name="Submit job").click()
    expect(error).to_have_text(re.compile(r"^Metric definitions, row 1, regex: "))
    expect(error).not_to_contain_text("body")
    assert server.call("admin", "GET", "v1/training-jobs?name_prefix=refused")["items"] == []
