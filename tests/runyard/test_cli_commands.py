"""The CLI's job commands against the API in this process: machine-readable output,
plain text off a terminal, metrics, download, delete, clone, and refusals in the
command line's words."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient
from sqlalchemy import update

from contract import storage
from runyard import cli, job_commands
from runyard.client import Client
from service.jobs.models import TrainingJob
from service.kit.db import session_scope
from service.settings import Settings
from tests.conftest import log_line, submit_for_instances
from tests.runyard.in_process import InProcessClient

JOB = "/v1/training-jobs/job-1"
ESCAPE = "\x1b["


@pytest.fixture
def runyard(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for module in (cli, job_commands):
        monkeypatch.setattr(module, "Client", lambda: InProcessClient(api))
    # Off a terminal, as under CI: rich must write plain text.
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    return CliRunner()


def _run(runner: CliRunner, *args: str, code: int = 0) -> Result:
    result = runner.invoke(cli.main, list(args))
    assert result.exit_code == code, (result.output, result.stderr, result.exception)
    return result


def _job_with_metrics(api: TestClient, settings: Settings, source_dir: Path, **spec: Any) -> None:
    headers = submit_for_instances(
        api,
        settings,
        source_dir,
        hyperparameters={"epochs": 3, "lr": 0.1},
        inputs={"train": {"uri": source_dir.as_uri(), "input_mode": "File"}},
        metric_definitions=[{"name": "loss", "regex": r"loss: (\S+)"}],
        **spec,
    )
    lines = [log_line(seq, seq, f"loss: {value}") for seq, value in enumerate([0.9, 0.5, 0.2], 1)]
    shipped = api.post(f"{JOB}/instances/algo-1/logs", json={"lines": lines}, headers=headers)
    assert shipped.status_code == 200, shipped.text


def test_json_output_is_the_apis_and_text_is_plain_off_a_terminal(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    _job_with_metrics(api, settings, source_dir)

    listed = json.loads(_run(runyard, "list", "--output", "json").stdout)
    assert [item["name"] for item in listed["items"]] == ["job-1"]
    assert listed["next_cursor"] is None
    described = json.loads(_run(runyard, "describe", "job-1", "-o", "json").stdout)
    assert described == api.get(JOB).json()
    logs = [
        json.loads(line)
        for line in _run(runyard, "logs", "job-1", "-o", "json").stdout.splitlines()
    ]
    assert [event["message"] for event in logs] == ["loss: 0.9", "loss: 0.5", "loss: 0.2"]
    assert {event["host"] for event in logs} == {"algo-1"}
    metrics = json.loads(_run(runyard, "metrics", "job-1", "-o", "json").stdout)
    assert metrics["job"] == "job-1"
    assert [(s["name"], [p["value"] for p in s["points"]]) for s in metrics["metrics"]] == [
        ("loss", [0.9, 0.5, 0.2])
    ]

    for command in (["list"], ["describe", "job-1"], ["metrics", "job-1"]):
        assert ESCAPE not in _run(runyard, *command).stdout, command


def test_statuses_are_coloured_on_a_terminal_unless_no_color(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    runyard: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    submit_for_instances(api, settings, source_dir)
    api.post(f"{JOB}/stop")
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich: write as to a terminal
    coloured = _run(runyard, "list").stdout
    assert f"{ESCAPE}33mStopped{ESCAPE}0m" in coloured
    monkeypatch.setenv("NO_COLOR", "1")
    assert ESCAPE not in _run(runyard, "list").stdout


def test_describe_shows_what_the_job_was_given(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner, tmp_path: Path
) -> None:
    _job_with_metrics(api, settings, source_dir, output_path=(tmp_path / "out").as_uri())
    lines = _run(runyard, "describe", "job-1").stdout.splitlines()
    assert "Image:            builtin" in lines
    assert f"Output path:      {tmp_path / 'out'}" in lines
    assert "Max run:          24h00m" in lines
    hyperparameters = lines.index("Hyperparameters:")
    assert lines[hyperparameters + 1 : hyperparameters + 3] == ["  epochs  3", "  lr      0.1"]
    channels = lines.index("Channels:")
    assert lines[channels + 1] == f"  train  {source_dir} (File)"
    metrics = lines.index("Metrics:")
    assert lines[metrics + 1] == "  loss  0.2           at 2026-01-01 00:00:03"


def test_metrics_shows_each_metrics_range_and_trend(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    _job_with_metrics(api, settings, source_dir)
    assert _run(runyard, "metrics", "job-1").stdout.splitlines() == [
        "METRIC  LATEST  MIN  MAX  POINTS  TREND",
        "loss    0.2     0.2  0.9  3       █▄▁",
    ]


def test_metrics_with_instance_shows_each_hosts_own_measures(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    headers = submit_for_instances(api, settings, source_dir, instance_count=2)
    start = datetime.now(UTC).timestamp() - 60
    for host, cpu in (("algo-1", [150.0, 90.0]), ("algo-2", [20.0, 40.0])):
        rows = [[start + 10 * i, "CPUUtilization", value] for i, value in enumerate(cpu)]
        sent = api.post(
            f"{JOB}/instances/{host}/metrics",
            content=json.dumps({"rows": rows}),
            headers={**headers.of(host), "Content-Type": "application/json"},
        )
        assert sent.status_code == 200, sent.text
    lines = _run(runyard, "metrics", "job-1", "--instance").stdout.splitlines()
    assert lines[1:] == [
        "CPUUtilization@algo-1  90      90   150  2       █▁",
        "CPUUtilization@algo-2  40      20   40   2       ▁█",
    ]
    # The script's own metrics are apart: this job defines none.
    assert "no metric points yet" in _run(runyard, "metrics", "job-1").stdout


def test_download_writes_the_model_where_asked(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner, tmp_path: Path
) -> None:
    submit_for_instances(api, settings, source_dir)
    assert _run(runyard, "download", "job-1", "--to", str(tmp_path), code=1)
    job = api.get(JOB).json()
    uri = storage.model_uri(job["spec"]["output_path"], "job-1")
    storage.local_path(uri).parent.mkdir(parents=True)
    weights = bytes(range(256)) * 5000
    storage.local_path(uri).write_bytes(weights)
    with session_scope(settings.database_url) as session:
        session.execute(update(TrainingJob).values(model_artifacts=uri))

    result = _run(runyard, "download", "job-1", "--to", str(tmp_path))
    target = tmp_path / "job-1-model.tar.gz"
    assert result.stdout == f"{target} ({len(weights)} bytes)\n"
    assert target.read_bytes() == weights
    _run(runyard, "download", "job-1", "--to", str(tmp_path / "named.tar.gz"))
    assert (tmp_path / "named.tar.gz").read_bytes() == weights
    # A directory named with a trailing slash is made, as `aws s3 cp ... dir/` makes it.
    _run(runyard, "download", "job-1", "--to", f"{tmp_path / 'new' / 'dir'}/")
    assert (tmp_path / "new" / "dir" / "job-1-model.tar.gz").read_bytes() == weights
    # Without one, a missing parent is a typo, not a directory to make.
    refused = _run(
        runyard, "download", "job-1", "--to", str(tmp_path / "nowhere" / "m.tgz"), code=2
    )
    assert "end --to with / to have it made" in refused.stderr
    assert not (tmp_path / "nowhere").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []

    # The output data, beside the model, once the runtime stored some.
    refused = _run(runyard, "download", "job-1", "--output-data", "--to", str(tmp_path), code=1)
    assert "no output data stored" in refused.stderr
    output = storage.local_path(storage.output_data_uri(job["spec"]["output_path"], "job-1"))
    output.write_bytes(b"evaluation")
    _run(runyard, "download", "job-1", "--output-data", "--to", str(tmp_path))
    assert (tmp_path / "job-1-output.tar.gz").read_bytes() == b"evaluation"


def test_delete_refuses_a_running_job_then_deletes_it_once_ended(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    submit_for_instances(api, settings, source_dir, output_path=out.as_uri())
    refused = _run(runyard, "delete", "job-1", code=1)
    assert "has not ended (InProgress); stop it first (runyard stop job-1)" in refused.stderr
    (out / "job-1" / "output").mkdir(parents=True)
    (out / "job-1" / "output" / "model.tar.gz").write_bytes(b"w")
    api.post(f"{JOB}/stop")
    deleted = _run(runyard, "delete", "job-1", "--remove-artifacts")
    assert deleted.stdout == f"deleted job-1 and the 1 files under {out}/job-1/\n"
    assert not (out / "job-1").exists()
    assert api.get(JOB).status_code == 404


def test_clone_submits_the_request_again_with_overrides(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    submit_for_instances(
        api,
        settings,
        source_dir,
        name=None,
        base_job_name="exp",
        hyperparameters={"epochs": 3, "lr": 0.1},
        environment={"MODE": "fast"},
    )
    original = api.get("/v1/training-jobs").json()["items"][0]["name"]
    result = _run(runyard, "clone", original, "-H", "lr=0.01", "--max-run", "600")
    name = result.stdout.removeprefix("Submitted training job ").strip()
    assert name != original
    assert name.startswith("exp-2")
    first = api.get(f"/v1/training-jobs/{original}").json()["spec"]
    again = api.get(f"/v1/training-jobs/{name}").json()["spec"]
    assert again["hyperparameters"] == {"epochs": 3, "lr": 0.01}
    assert again["max_run"] == 600
    unchanged = {key for key in first if key not in ("name", "hyperparameters", "max_run")}
    assert {key: again.get(key) for key in unchanged} == {key: first[key] for key in unchanged}

    named = _run(runyard, "clone", original, "--name", "exp-copy")
    assert named.stdout == "Submitted training job exp-copy\n"
    # A name that was given, not generated, is the base of the copy's whole.
    again = _run(runyard, "clone", "exp-copy").stdout.removeprefix("Submitted training job ")
    assert again.startswith("exp-copy-2")


def test_network_isolation_is_a_flag_of_submit_and_describe_says_so(
    api: TestClient, source_dir: Path, runyard: CliRunner
) -> None:
    uri = source_dir.as_uri()
    flags = ["--source-uri", uri, "-e", "train.py", "-t", "local"]
    _run(runyard, "submit", *flags, "--name", "closed", "--network-isolation")
    _run(runyard, "submit", *flags, "--name", "open")
    closed, opened = (api.get(f"/v1/training-jobs/{n}").json() for n in ("closed", "open"))
    assert closed["spec"]["enable_network_isolation"] is True
    assert opened["spec"]["enable_network_isolation"] is False
    network = "Network:          isolated (the instances reach one another only)"
    assert network in _run(runyard, "describe", "closed").stdout.splitlines()
    assert "Network:" not in _run(runyard, "describe", "open").stdout


def test_refusals_name_the_flag_and_a_mistyped_type_gets_a_suggestion(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    uri = source_dir.as_uri()
    typo = _run(runyard, "submit", "--source-uri", uri, "-e", "train.py", "-t", "lcoal", code=1)
    assert typo.stderr.startswith("error: --instance-type: ")
    assert "(did you mean local?)" in typo.stderr
    missing = _run(runyard, "submit", "--source-uri", uri, "-t", "local", code=1)
    assert missing.stderr == "error: --entry-point: Field required (HTTP 422)\n"
    relative = _run(
        runyard,
        "submit",
        "--source-uri",
        uri,
        "-e",
        "x.py",
        "-t",
        "local",
        "--tensorboard-s3-output-path",
        uri,
        "--tensorboard-local-path",
        "/tmp/tb",
        code=1,
    )
    assert relative.stderr == (
        "error: --tensorboard-local-path: must be a directory below /opt/ml "
        "(as /opt/ml/output/tensorboard) (HTTP 422)\n"
    )
    # A SageMaker type close to the typo is not suggested: this server does not run it.
    unrunnable = _run(
        runyard, "submit", "--source-uri", uri, "-e", "x.py", "-t", "ml.m5.xlarg", code=1
    )
    assert "did you mean" not in unrunnable.stderr
    assert "this server runs: local" in unrunnable.stderr
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_an_unknown_job_name_gets_the_closest_known_one(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    submit_for_instances(api, settings, source_dir)
    for command in (["describe", "jbo-1"], ["logs", "job-11"], ["stop", "Job-1"]):
        refused = _run(runyard, *command, code=1)
        assert refused.stderr.endswith("(HTTP 404); did you mean job-1?\n"), command
    far = _run(runyard, "describe", "resnet-sweep", code=1)
    assert far.stderr == "error: no training job named 'resnet-sweep' (HTTP 404)\n"


def test_interrupt_reaches_the_instance_route_the_contract_defines(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    submit_for_instances(api, settings, source_dir)
    refused = _run(runyard, "interrupt", "job-1", code=1)
    assert refused.stderr == (
        "error: training job 'job-1' does not run on spot instances (HTTP 409)\n"
    )
    unknown_host = _run(runyard, "interrupt", "job-1", "--host", "algo-9", code=1)
    assert "training job 'job-1' has no host 'algo-9' (HTTP 404)" in unknown_host.stderr


def test_following_a_waiting_job_says_what_it_waits_for(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    runyard: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    submit_for_instances(api, settings, source_dir)
    reason = "capacity: 2 of 2 local instances in use"
    with session_scope(settings.database_url) as session:
        session.execute(update(TrainingJob).values(pending_reason=reason))
    waits: list[float] = []

    def a_while_later(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:  # the reason was said once though read twice; then it ends
            api.post(f"{JOB}/stop")

    monkeypatch.setattr(time, "sleep", a_while_later)
    result = _run(runyard, "logs", "job-1", "-f")
    assert result.stderr == f"waiting: {reason}\n"
    assert len(waits) == 2


def test_ctrl_c_while_following_says_the_job_keeps_running(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    runyard: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    submit_for_instances(api, settings, source_dir)

    def interrupted(*_args: object, **_kwargs: object) -> Iterator[dict[str, Any]]:
        raise KeyboardInterrupt
        yield {}

    monkeypatch.setattr(Client, "follow_logs", interrupted)
    result = _run(runyard, "logs", "job-1", "-f", code=130)
    assert result.stderr == "\njob-1 keeps running; `runyard stop job-1` stops it.\n"
    assert api.get(JOB).json()["status"] == "InProgress"


def test_waiting_shows_the_time_waited(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    submit_for_instances(api, settings, source_dir)
    lines = _run(runyard, "stop", "job-1", "--wait").stdout.splitlines()
    assert lines[0] == "job-1: Stopped"
    assert all(line.endswith("(+0m00s)") for line in lines[1:-2]), lines
    assert [line.split()[2] for line in lines[1:-2]] == ["Starting", "Stopping", "Stopped"]
    assert lines[-2:] == ["Waited 0m00s", "job-1: Stopped"]


def test_list_filters_sorts_and_pages_by_the_same_list(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    for name, team in (("alpha-bert", "nlp"), ("beta-bert", "nlp"), ("gamma-resnet", "vision")):
        submit_for_instances(
            api, settings, source_dir, name=name, tags=[{"key": "team", "value": team}]
        )

    def names(*flags: str) -> list[str]:
        listed = json.loads(_run(runyard, "list", *flags, "-o", "json").stdout)
        return [job["name"] for job in listed["items"]]

    assert names("--name-contains", "BERT", "--sort", "name") == ["alpha-bert", "beta-bert"]
    assert names("--tag", "team=vision") == ["gamma-resnet"]
    assert names("--tag", "team", "--sort", "-name") == [
        "gamma-resnet",
        "beta-bert",
        "alpha-bert",
    ]
    # The next page's command keeps the filters and the order its cursor was made for.
    first = _run(runyard, "list", "--tag", "team=nlp", "--sort", "name", "--limit", "1").stdout
    more = first.splitlines()[-1].removeprefix("more: runyard ")
    assert more.startswith("list --tag team=nlp --sort name --cursor ")
    second = _run(runyard, *more.split(), "-o", "json").stdout
    assert [job["name"] for job in json.loads(second)["items"]] == ["beta-bert"]


def test_submit_takes_metric_definitions_and_tags_and_clone_replaces_them_by_name(
    api: TestClient, source_dir: Path, runyard: CliRunner
) -> None:
    uri = source_dir.as_uri()
    base = ["--source-uri", uri, "-e", "train.py", "-t", "local"]
    _run(
        runyard,
        "submit",
        *base,
        "--name",
        "tagged",
        "--metric-definition",
        r"train:loss=loss: ([0-9.]+)",
        "--metric-definition",
        "acc=acc=(\\S+)",
        "--tag",
        "team=nlp",
        "--tag",
        "stage=",
    )
    spec = api.get("/v1/training-jobs/tagged").json()["spec"]
    # NAME is up to the first "=": a regex may hold more.
    assert spec["metric_definitions"] == [
        {"name": "train:loss", "regex": "loss: ([0-9.]+)"},
        {"name": "acc", "regex": "acc=(\\S+)"},
    ]
    assert spec["tags"] == [{"key": "team", "value": "nlp"}, {"key": "stage", "value": ""}]
    listed = json.loads(_run(runyard, "list", "--tag", "team=nlp", "-o", "json").stdout)
    assert [item["name"] for item in listed["items"]] == ["tagged"]

    # A clone's flags replace the original's of the same name or key, and keep the rest.
    _run(runyard, "clone", "tagged", "--name", "retagged", "--tag", "team=vision")
    again = api.get("/v1/training-jobs/retagged").json()["spec"]
    assert again["tags"] == [{"key": "stage", "value": ""}, {"key": "team", "value": "vision"}]
    assert again["metric_definitions"] == spec["metric_definitions"]

    refused = _run(runyard, "submit", *base, "--tag", "team", code=2)
    assert "Invalid value for --tag: expected KEY=VALUE, got 'team'" in refused.stderr
    refused = _run(runyard, "submit", *base, "--metric-definition", "loss", code=2)
    assert "expected NAME=REGEX, got 'loss'" in refused.stderr
    # What the server refuses is said of the flag.
    refused = _run(runyard, "submit", *base, "--metric-definition", "loss=loss: [0-9]+", code=1)
    assert refused.stderr.startswith("error: --metric-definition (0.regex): ")
    stored = {item["name"] for item in api.get("/v1/training-jobs").json()["items"]}
    assert stored == {"tagged", "retagged"}


def test_a_spec_files_tags_are_a_mapping_or_sagemakers_list_and_flags_replace_their_keys(
    api: TestClient, source_dir: Path, runyard: CliRunner, tmp_path: Path
) -> None:
    spec = f"source_uri: {source_dir.as_uri()}\nentry_point: train.py\ninstance_type: local\n"
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(spec + "tags: {team: vision, stage: dev}\n")
    sagemakers = tmp_path / "sagemaker.yaml"
    sagemakers.write_text(spec + "tags: [{Key: team, Value: vision}, {Key: stage, Value: dev}]\n")

    _run(runyard, "submit", str(mapping), "--name", "as-mapping")
    _run(runyard, "submit", str(sagemakers), "--name", "as-list", "--tag", "stage=prod")

    tags = {
        name: api.get(f"{JOB.rpartition('/')[0]}/{name}").json()["spec"]["tags"]
        for name in ("as-mapping", "as-list")
    }
    assert tags["as-mapping"] == [
        {"key": "team", "value": "vision"},
        {"key": "stage", "value": "dev"},
    ]
    assert tags["as-list"] == [
        {"key": "team", "value": "vision"},
        {"key": "stage", "value": "prod"},
    ]


def test_a_server_administrator_grants_a_project_places(
    api: TestClient, runyard: CliRunner, tmp_path: Path
) -> None:
    data, out = tmp_path / "team-data", tmp_path / "team-out"
    _run(runyard, "project", "create", "vision")
    granted = _run(runyard, "project", "grant", "vision", str(data))  # a path: a file:// URI
    assert granted.stdout == f"granted vision read-only {data.as_uri()}\n"
    _run(runyard, "project", "grant", "vision", out.as_uri(), "--read-write")
    _run(runyard, "project", "grant", "vision", "s3://team-bucket/vision")
    listed = _run(runyard, "project", "grants", "vision").stdout.splitlines()
    assert listed[0].split() == ["PREFIX", "ACCESS", "GRANTED"]
    assert [line.split()[:2] for line in listed[1:]] == [
        [data.as_uri(), "read-only"],
        [out.as_uri(), "read-write"],
        ["s3://team-bucket/vision", "read-only"],
    ]
    revoked = _run(runyard, "project", "revoke", "vision", "s3://team-bucket/vision")
    assert revoked.stdout == "revoked vision's grant of s3://team-bucket/vision\n"
    assert len(_run(runyard, "project", "grants", "vision").stdout.splitlines()) == 3
    # Refusals in the command line's words: the field, and the role.
    bad = _run(runyard, "project", "grant", "vision", "s3://Bad_Bucket/x", code=1)
    assert "prefix" in bad.stderr
    assert "not an S3 bucket name" in bad.stderr
    member = api.post("/v1/tokens", json={"name": "mo", "project": "vision"}).json()["token"]
    api.headers["Authorization"] = f"Bearer {member}"
    refused = _run(runyard, "project", "grant", "vision", str(tmp_path / "more"), code=1)
    assert "needs a server administrator" in refused.stderr
    assert "needs the admin role" in _run(runyard, "project", "grants", "vision", code=1).stderr


def test_the_project_commands_say_what_they_do() -> None:
    runner = CliRunner()
    helped = runner.invoke(cli.main, ["project", "--help"]).stdout
    for command in ("create", "list", "grant", "grants", "revoke"):
        assert f"  {command} " in helped, helped
    grant_help = runner.invoke(cli.main, ["project", "grant", "--help"]).stdout
    assert "--read-write" in grant_help
    assert "--read-only" in grant_help
    assert "RUNYARD_FILE_ROOTS" in grant_help
