"""Every rule of the job spec: a bad spec gets 422 naming the field, and nothing is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.jobs.schemas import JobCreate
from service.kit.errors import SpecError
from service.settings import Settings
from service.training import preparation
from tests.conftest import job_spec, submit_for_instances


def _stored_jobs(api: TestClient) -> list[dict[str, Any]]:
    response = api.get("/v1/training-jobs")
    assert response.status_code == 200
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def _many(count: int, make: Any) -> dict[str, Any]:
    return dict(make(i) for i in range(count))


CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("name starts with a dash", {"name": "-bad"}, ["name"]),
    ("name with underscore", {"name": "bad_name"}, ["name"]),
    ("name too long", {"name": "a" * 64}, ["name"]),
    ("base name pattern", {"name": None, "base_job_name": "bad name"}, ["base_job_name"]),
    ("name and base name", {"base_job_name": "base"}, ["name"]),
    ("unknown field", {"bogus": 1}, ["bogus"]),
    (
        "too many hyperparameters",
        {"hyperparameters": _many(101, lambda i: (f"k{i}", i))},
        ["hyperparameters"],
    ),
    ("hyperparameter key too long", {"hyperparameters": {"k" * 257: 1}}, ["hyperparameters"]),
    ("hyperparameter value too long", {"hyperparameters": {"k": "v" * 2500}}, ["hyperparameters"]),
    (
        "hyperparameters too large together for the script's environment",
        {"hyperparameters": _many(53, lambda i: (f"k{i}", "v" * 2490))},
        ["hyperparameters"],
    ),
    ("environment key pattern", {"environment": {"1BAD": "x"}}, ["environment"]),
    ("environment key with dash", {"environment": {"BAD-KEY": "x"}}, ["environment"]),
    ("environment reserved key", {"environment": {"RUNYARD_JOB_TOKEN": "x"}}, ["environment"]),
    ("environment value too long", {"environment": {"K": "v" * 513}}, ["environment"]),
    (
        "too many environment variables",
        {"environment": _many(101, lambda i: (f"K{i}", "v"))},
        ["environment"],
    ),
    (
        "unknown distribution key",
        {"distribution": {"horovod": {"enabled": True}}},
        ["distribution", "horovod"],
    ),
    (
        "unknown key inside a mode",
        {"distribution": {"torch_distributed": {"enabled": True, "x": 1}}},
        ["distribution", "torch_distributed", "x"],
    ),
    (
        "two distribution modes",
        {"distribution": {"torch_distributed": {"enabled": True}, "pytorchddp": {"enabled": True}}},
        ["distribution"],
    ),
    (
        "model parallel without mpi",
        {"distribution": {"smdistributed": {"modelparallel": {"enabled": True}}}},
        ["distribution", "mpi"],
    ),
    *[
        (
            f"model parallel {case}",
            {
                "instance_count": 2,
                "distribution": {
                    "mpi": {"enabled": True, "processes_per_host": 2},
                    "smdistributed": {"modelparallel": {"enabled": True, "parameters": given}},
                },
            },
            ["distribution", "smdistributed", "modelparallel", "parameters", *named],
        )
        for case, given, named in [
            ("parameters not an object", [1], []),
            (
                "tensor parallel not dividing what the stages leave",
                {"tensor_parallel_degree": 4, "partitions": 2, "ddp": True, "microbatches": 2},
                ["tensor_parallel_degree"],
            ),
            (
                "tensor parallel not dividing",
                {"tensor_parallel_degree": 3, "ddp": True},
                ["tensor_parallel_degree"],
            ),
            ("unknown parameter", {"partition": 2}, ["partition"]),
            ("partitions not dividing", {"partitions": 3, "ddp": True}, ["partitions"]),
            ("partitions as a bool", {"partitions": True}, ["partitions"]),
            (
                "two names disagree",
                {"partitions": 2, "pipeline_parallel_degree": 4},
                ["pipeline_parallel_degree"],
            ),
            ("no microbatches", {"partitions": 4, "microbatches": 0}, ["microbatches"]),
            ("too few microbatches", {"partitions": 4, "microbatches": 2}, ["microbatches"]),
            (
                "unknown pipeline",
                {"partitions": 4, "pipeline": "1f1b", "microbatches": 4},
                ["pipeline"],
            ),
            (
                "sharding not dividing",
                {"sharded_data_parallel_degree": 3, "ddp": True},
                ["sharded_data_parallel_degree"],
            ),
            (
                "sharding not dividing what tensor parallelism leaves",
                {"tensor_parallel_degree": 2, "sharded_data_parallel_degree": 4, "ddp": True},
                ["sharded_data_parallel_degree"],
            ),
            (
                "late parameters for tensor parallelism in pipeline stages",
                {
                    "tensor_parallel_degree": 2,
                    "partitions": 2,
                    "microbatches": 2,
                    "delayed_parameter_initialization": True,
                },
                ["delayed_parameter_initialization"],
            ),
            (
                "sharding with a pipeline",
                {
                    "partitions": 2,
                    "sharded_data_parallel_degree": 2,
                    "ddp": True,
                    "microbatches": 2,
                },
                ["sharded_data_parallel_degree"],
            ),
            ("replicas without ddp", {"partitions": 2, "microbatches": 2}, ["ddp"]),
            ("fp16 and bf16", {"fp16": True, "bf16": True, "ddp": True}, ["bf16"]),
            ("memory weight above one", {"memory_weight": 2, "ddp": True}, ["memory_weight"]),
            (
                "default partition too high",
                {"partitions": 2, "default_partition": 2, "ddp": True, "microbatches": 2},
                ["default_partition"],
            ),
        ]
    ],
    ("instance_count zero", {"instance_count": 0}, ["instance_count"]),
    ("instance_count above maximum", {"instance_count": 17}, ["instance_count"]),
    ("unknown instance type", {"instance_type": "ml.nope.large"}, ["instance_type"]),
    ("instance type without a backend", {"instance_type": "ml.p3.2xlarge"}, ["instance_type"]),
    ("unknown backend", {"backend": "slurm"}, ["backend"]),
    ("entry point escapes the source", {"entry_point": "../train.py"}, ["entry_point"]),
    ("absolute entry point", {"entry_point": "/etc/passwd"}, ["entry_point"]),
    ("entry point not in the source", {"entry_point": "missing.py"}, ["entry_point"]),
    ("source on an unsupported scheme", {"source_uri": "s3://bucket/code.tar.gz"}, ["source_uri"]),
    ("source that does not exist", {"source_uri": "file:///nonexistent/code"}, ["source_uri"]),
    ("relative file URI", {"source_uri": "file://relative/path"}, ["source_uri"]),
    ("source as a path of the server", {"source_uri": "/srv/code.tar.gz"}, ["source_uri"]),
    ("source as a relative path", {"source_uri": "code/"}, ["source_uri"]),
    (
        "source in a channel the job lacks",
        {"source_uri": "/opt/ml/input/data/code/sourcedir.tar.gz"},
        ["source_uri"],
    ),
    (
        "source in a channel that is piped",
        {
            "source_uri": "/opt/ml/input/data/code/sourcedir.tar.gz",
            "inputs": {"code": {"uri": "file:///tmp", "input_mode": "Pipe"}},
        },
        ["source_uri"],
    ),
    (
        "source in a channel that is sharded",
        {
            "source_uri": "/opt/ml/input/data/code/sourcedir.tar.gz",
            "inputs": {"code": {"uri": "file:///tmp", "distribution": "ShardedByS3Key"}},
        },
        ["source_uri"],
    ),
    (
        "network isolation that is not a flag",
        {"enable_network_isolation": "sometimes"},
        ["enable_network_isolation"],
    ),
    ("channel name", {"inputs": {"bad/name": "file:///tmp"}}, ["inputs"]),
    ("too many channels", {"inputs": _many(21, lambda i: (f"c{i}", "file:///tmp"))}, ["inputs"]),
    # What is under a channel's URI is the instances' to find (a ClientError at download).
    (
        "channel on an unsupported scheme",
        {"inputs": {"train": "gs://b/x"}},
        ["inputs", "train", "uri"],
    ),
    ("channel without a bucket", {"inputs": {"train": "s3:///x"}}, ["inputs", "train", "uri"]),
    (
        "channel named like a Pipe channel's FIFO",
        {
            "inputs": {
                "train": {"uri": "file:///tmp", "input_mode": "Pipe"},
                "train_0": "file:///tmp",
            }
        },
        ["inputs"],
    ),
    (
        "unknown input mode",
        {"inputs": {"train": {"uri": "file:///tmp", "input_mode": "Stream"}}},
        ["inputs", "train", "input_mode"],
    ),
    ("output path scheme", {"output_path": "gs://bucket/out"}, ["output_path"]),
    ("max_run zero", {"max_run": 0}, ["max_run"]),
    ("max_run above 28 days", {"max_run": 28 * 24 * 3600 + 1}, ["max_run"]),
    ("volume size zero", {"volume_size": 0}, ["volume_size"]),
    (
        "hyperparameter that is not a number",
        {"hyperparameters": {"lr": float("nan")}},
        ["hyperparameters"],
    ),
    ("infinite hyperparameter", {"hyperparameters": {"lr": float("inf")}}, ["hyperparameters"]),
    ("NUL in a hyperparameter", {"hyperparameters": {"tag": "a\x00b"}}, ["hyperparameters", "tag"]),
    (
        "NUL in a hyperparameter key",
        {"hyperparameters": {"t\x00g": 1}},
        ["hyperparameters", "t\x00g"],
    ),
    ("NUL in the environment", {"environment": {"FLAG": "x\x00"}}, ["environment", "FLAG"]),
    ("NUL in the entry point", {"entry_point": "train\x00.py"}, ["entry_point"]),
    ("output path is a file", {"output_path": "file:///etc/hostname"}, ["output_path"]),
    ("unknown framework", {"framework": "jax"}, ["framework"]),
    (
        "model parallel together with data parallel",
        {
            "distribution": {
                "smdistributed": {
                    "dataparallel": {"enabled": True},
                    "modelparallel": {"enabled": True},
                }
            }
        },
        ["distribution"],
    ),
    (
        "parameter_server together with mpi",
        {"distribution": {"parameter_server": {"enabled": True}, "mpi": {"enabled": True}}},
        ["distribution"],
    ),
    (
        "multi_worker_mirrored_strategy without TensorFlow",
        {"distribution": {"multi_worker_mirrored_strategy": {"enabled": True}}},
        ["distribution", "multi_worker_mirrored_strategy"],
    ),
    (
        "torch_distributed for a TensorFlow script",
        {"framework": "tensorflow", "distribution": {"torch_distributed": {"enabled": True}}},
        ["distribution", "torch_distributed"],
    ),
    (
        "data parallel for a TensorFlow script",
        {
            "framework": "tensorflow",
            "distribution": {"smdistributed": {"dataparallel": {"enabled": True}}},
        },
        ["distribution", "smdistributed", "dataparallel"],
    ),
    *[
        (
            f"custom_mpi_options with {option}",
            {"distribution": {"mpi": {"enabled": True, "custom_mpi_options": option}}},
            ["distribution", "mpi", "custom_mpi_options"],
        )
        for option in (
            "-np 8",
            "--host algo-1:8",
            "-H algo-9",
            "--hostfile /etc/hosts",
            "--host=algo-3",
            "--mca plm_ssh_agent /bin/evil",
            "--mca btl_tcp_if_include $(id)",
            "-x 'A=b;c'",
            "--mca 'unbalanced",
        )
    ],
    (
        "data parallel custom_mpi_options with -np",
        {
            "distribution": {
                "smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": "-np 3"}}
            }
        },
        ["distribution", "smdistributed", "dataparallel", "custom_mpi_options"],
    ),
    (
        "processes_per_host zero",
        {"distribution": {"mpi": {"enabled": True, "processes_per_host": 0}}},
        ["distribution", "mpi", "processes_per_host"],
    ),
    ("too many tags", {"tags": [{"key": f"k{i}", "value": "v"} for i in range(51)]}, ["tags"]),
    ("too many tags as a mapping", {"tags": {f"k{i}": "v" for i in range(51)}}, ["tags"]),
    ("a tag's value not text", {"tags": {"cost": 5}}, ["tags"]),
    ("a tag in both spellings", {"tags": [{"Key": "team", "value": "vision"}]}, ["tags"]),
    ("tags as text", {"tags": "team=vision"}, ["tags"]),
    ("spot without max_wait", {"use_spot_instances": True}, ["max_wait"]),
    ("max_wait without spot", {"max_wait": 7200}, ["max_wait"]),
    (
        "max_wait below max_run",
        {"use_spot_instances": True, "max_run": 3600, "max_wait": 60},
        ["max_wait"],
    ),
    ("relative checkpoint path", {"checkpoint_local_path": "ckpt"}, ["checkpoint_local_path"]),
    (
        # The runtime stores what is there as root: only a directory of the job's own.
        "TensorBoard path of the machine's",
        {"tensorboard_s3_output_path": "s3://b/tb", "tensorboard_local_path": "/var/log"},
        ["tensorboard_local_path"],
    ),
    (
        "TensorBoard path in the runtime's input",
        {"tensorboard_s3_output_path": "s3://b/tb", "tensorboard_local_path": "/opt/ml/input/tb"},
        ["tensorboard_local_path"],
    ),
    (
        "TensorBoard path without where it is stored",
        {"tensorboard_local_path": "/opt/ml/output/tensorboard"},
        ["tensorboard_local_path"],
    ),
    (
        "checkpoint path is the base dir",
        {"checkpoint_local_path": "/opt/ml"},
        ["checkpoint_local_path"],
    ),
    (
        # The local backend's instances would have their runtime write it on the server.
        "checkpoint path of the server's machine",
        {"checkpoint_local_path": "/etc/cron.d"},
        ["checkpoint_local_path"],
    ),
    (
        # Below a directory the job's user owns, which it could swap for a link.
        "checkpoint path deep in /opt/ml",
        {"checkpoint_local_path": "/opt/ml/output/ckpt"},
        ["checkpoint_local_path"],
    ),
    (
        "checkpoint path in the runtime's own directory",
        {"checkpoint_local_path": "/opt/ml/.runyard"},
        ["checkpoint_local_path"],
    ),
    ("checkpoint uri scheme", {"checkpoint_s3_uri": "gs://bucket/ckpt"}, ["checkpoint_s3_uri"]),
    ("too many retries", {"max_retry_attempts": 31}, ["max_retry_attempts"]),
    (
        "retry rule with a bad regex",
        {
            "max_retry_attempts": 1,
            "retry_rules": [{"on_failure_reasons": ["("], "action": "retry"}],
        },
        ["retry_rules", "0", "on_failure_reasons"],
    ),
    (
        "retry rule cause",
        {"retry_rules": [{"on_failure_causes": ["OutOfMemory", "OOMKilled"], "action": "fail"}]},
        ["retry_rules", "0", "on_failure_causes", "1"],
    ),
    (
        "retry rule action",
        {"retry_rules": [{"on_exit_codes": [1], "action": "maybe"}]},
        ["retry_rules", "0", "action"],
    ),
    (
        "a rule that retries with no retries allowed",
        {"retry_rules": [{"on_exit_codes": [1], "action": "retry"}]},
        ["retry_rules", "0", "action"],
    ),
    ("priority out of range", {"priority": 5000}, ["priority"]),
    (
        "progress metric not defined",
        {"progress_metric": {"name": "epoch", "total": 10}},
        ["progress_metric"],
    ),
    (
        "channel data type",
        {"inputs": {"train": {"uri": "file:///x", "s3_data_type": "Augmented"}}},
        ["inputs", "train", "s3_data_type"],
    ),
]


@pytest.mark.parametrize(("case", "overrides", "field"), CASES, ids=[case for case, _, _ in CASES])
def test_bad_spec_is_refused_naming_the_field(
    api: TestClient, source_dir: Path, case: str, overrides: dict[str, Any], field: list[str]
) -> None:
    spec = {
        key: value for key, value in job_spec(source_dir, **overrides).items() if value is not None
    }
    # As text: a client may send NaN, which httpx itself would refuse to encode.
    body = json.dumps(spec)
    response = api.post(
        "/v1/training-jobs", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    locations = [[str(part) for part in error["loc"]] for error in response.json()["detail"]]
    assert any(loc[1 : 1 + len(field)] == field for loc in locations), (case, locations)
    assert _stored_jobs(api) == []


def test_text_that_spells_an_escaped_nul_is_no_nul(api: TestClient, source_dir: Path) -> None:
    """A NUL is looked for in the spec's JSON text first (as ``\\u0000``): a backslash
    the user wrote before ``u0000`` is text, and the job is taken as it is."""
    spelled = "a\\u0000b"
    spec = job_spec(source_dir, hyperparameters={"tag": spelled}, environment={"X": spelled})
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["hyperparameters"]["tag"] == spelled


def test_duplicate_name_is_a_conflict_and_stores_nothing_new(
    api: TestClient, source_dir: Path
) -> None:
    assert api.post("/v1/training-jobs", json=job_spec(source_dir)).status_code == 201
    response = api.post("/v1/training-jobs", json=job_spec(source_dir))
    assert response.status_code == 409
    assert "job-1" in response.json()["detail"]
    assert len(_stored_jobs(api)) == 1


def test_archive_source_must_hold_the_entry_point(
    api: TestClient, tmp_path: Path, source_dir: Path
) -> None:
    from contract.archive import make_tarball

    bundle = make_tarball(source_dir, tmp_path / "code.tar.gz")
    ok = api.post("/v1/training-jobs", json=job_spec(source_dir, source_uri=bundle.as_uri()))
    assert ok.status_code == 201, ok.text
    missing = api.post(
        "/v1/training-jobs",
        json=job_spec(source_dir, name="job-2", source_uri=bundle.as_uri(), entry_point="other.py"),
    )
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "entry_point"]


def test_hostile_archive_source_is_refused(
    api: TestClient, tmp_path: Path, source_dir: Path
) -> None:
    from tests.archives import archive_with_member

    bundle = archive_with_member(tmp_path / "evil.tar.gz", "../escape.py")
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, source_uri=bundle.as_uri()))
    assert response.status_code == 422
    assert "escape.py" in response.json()["detail"][0]["msg"]
    assert _stored_jobs(api) == []


def test_errors_never_echo_the_input(api: TestClient, source_dir: Path) -> None:
    secret = "s3cr3t-" + "x" * 600  # too long, so refused
    response = api.post(
        "/v1/training-jobs", json=job_spec(source_dir, environment={"API_KEY": secret})
    )
    assert response.status_code == 422
    assert "s3cr3t" not in response.text


def test_a_backend_the_server_does_not_use_is_refused(settings: Settings, source_dir: Path) -> None:
    # The server reaps and sizes its leases for its own backends only.
    settings = settings.model_copy(
        update={"backends": {"local": "local", "ml.m5.large": "kubernetes"}}
    )
    spec = JobCreate.model_validate(
        job_spec(source_dir, instance_type="ml.m5.large", backend="ec2")
    )
    with pytest.raises(SpecError) as refused:
        preparation.prepare(settings, spec, "default")
    assert refused.value.loc == ("backend",)
    assert refused.value.field_message == (
        "backend 'ec2' is not enabled on this server (RUNYARD_BACKENDS uses: kubernetes, local)"
    )


@pytest.mark.parametrize(
    ("backends", "local_isolation", "why"),
    [
        (
            {"local": "local"},
            "shared",
            "cannot be honoured: local instances share this machine's network here "
            "(RUNYARD_LOCAL_ISOLATION is shared)",
        ),
        (
            {"local": "local", "ml.m5.large": "kubernetes"},
            "auto",
            "cannot be honoured: the kubernetes backend cannot close its instances' network",
        ),
    ],
)
def test_network_isolation_is_refused_where_it_cannot_be_had(
    settings: Settings,
    source_dir: Path,
    backends: dict[str, str],
    local_isolation: str,
    why: str,
) -> None:
    settings = settings.model_copy(
        update={
            "backends": backends,
            "local": settings.local.model_copy(update={"isolation": local_isolation}),
        }
    )
    instance_type = next(iter(reversed(backends)))
    spec = JobCreate.model_validate(
        job_spec(source_dir, instance_type=instance_type, enable_network_isolation=True)
    )
    with pytest.raises(SpecError) as refused:
        preparation.prepare(settings, spec, "default")
    assert refused.value.loc == ("enable_network_isolation",)
    assert refused.value.field_message == why


BAD_NAMES = ["bad_name", "-bad", "bad-", "a" * 64, "", "name with spaces", "bad\n"]


@pytest.mark.parametrize("field", ["name", "base_job_name"])
@pytest.mark.parametrize("bad", BAD_NAMES, ids=[repr(name) for name in BAD_NAMES])
def test_a_bad_job_name_is_explained_in_words(
    api: TestClient, source_dir: Path, field: str, bad: str
) -> None:
    spec = {**job_spec(source_dir), "name": None, field: bad}
    response = api.post("/v1/training-jobs", json={k: v for k, v in spec.items() if v is not None})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", field]
    assert error["msg"].endswith(
        "must be 1 to 63 letters, digits and hyphens, starting and ending with a letter or digit"
    )
    assert "[" not in error["msg"]  # no regular expression


def test_a_bad_job_name_in_a_path_is_explained_in_words(api: TestClient) -> None:
    response = api.get("/v1/training-jobs/bad_name")
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["path", "name"]
    assert "letters, digits and hyphens" in error["msg"]
    assert "[" not in error["msg"]


UNKNOWN_KEYS: list[tuple[dict[str, Any], list[str], str]] = [
    ({"torch_distribute": {"enabled": True}}, ["torch_distribute"], "torch_distributed"),
    ({"mpi": {"enable": True}}, ["mpi", "enable"], "enabled"),
    (
        {"mpi": {"enabled": True, "process_per_host": 2}},
        ["mpi", "process_per_host"],
        "processes_per_host",
    ),
    (
        {"smdistributed": {"dataparalel": {"enabled": True}}},
        ["smdistributed", "dataparalel"],
        "dataparallel",
    ),
    ({"parameterserver": {"enabled": True}}, ["parameterserver"], "parameter_server"),
]


@pytest.mark.parametrize(
    ("distribution", "loc", "meant"), UNKNOWN_KEYS, ids=[meant for _, _, meant in UNKNOWN_KEYS]
)
def test_an_unknown_distribution_key_suggests_the_nearest(
    api: TestClient, source_dir: Path, distribution: dict[str, Any], loc: list[str], meant: str
) -> None:
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, distribution=distribution))
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "distribution", *loc]
    assert error["msg"] == f"unknown key; did you mean {meant!r}?"
    assert _stored_jobs(api) == []


def test_an_unknown_key_like_no_other_lists_the_keys(api: TestClient, source_dir: Path) -> None:
    response = api.post(
        "/v1/training-jobs", json=job_spec(source_dir, distribution={"horovod": {}})
    )
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "distribution", "horovod"]
    assert error["msg"] == (
        "unknown key; the keys are torch_distributed, pytorchddp, mpi, parameter_server, "
        "smdistributed, multi_worker_mirrored_strategy"
    )


# More digits than Python converts from text (4,300): json.loads raises deep inside.
HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (["instance_count"], HUGE),
        (["max_run"], HUGE),
        (["max_run"], "-" + HUGE),
        (["hyperparameters", "epochs"], HUGE),
        (["retry_rules", 0, "on_exit_codes", 1], HUGE),
        # Fields without a maximum of their own hold what a database column does.
        (["instance_count"], str(2**31)),
        (["retry_rules", 0, "on_exit_codes", 1], str(2**31)),
    ],
)
def test_an_integer_out_of_range_is_refused_naming_the_field(
    api: TestClient, source_dir: Path, field: list[str | int], value: str
) -> None:
    spec = job_spec(
        source_dir,
        max_retry_attempts=1,
        retry_rules=[{"on_exit_codes": [1, 2], "action": "retry"}],
        hyperparameters={"epochs": 3},
    )
    where: Any = spec
    for part in field[:-1]:
        where = where[part]
    where[field[-1]] = "@HUGE@"
    # As text: Python could not write the number as JSON itself.
    body = json.dumps(spec).replace('"@HUGE@"', value)
    headers = {"Content-Type": "application/json"}
    response = api.post("/v1/training-jobs", content=body, headers=headers)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", *field]
    assert value not in response.text
    assert _stored_jobs(api) == []
    # The same body without a token is refused for that first.
    anonymous = api.post(
        "/v1/training-jobs", content=body, headers={**headers, "Authorization": ""}
    )
    assert anonymous.status_code == 401


@pytest.mark.parametrize("field", ["exit_code", "attempt"])
def test_an_instance_report_out_of_range_is_refused_naming_the_field(
    api: TestClient, settings: Settings, source_dir: Path, field: str
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    report = {"phase": "Failed", "time": "2026-01-01T00:00:00Z", "exit_code": 1, field: 2**40}
    response = api.post(
        "/v1/training-jobs/job-1/instances/algo-1/status", json=report, headers=headers
    )
    assert response.status_code == 422, response.text
    assert [error["loc"] for error in response.json()["detail"]] == [["body", field]]
    assert api.get("/v1/training-jobs/job-1").json()["status"] != "Failed"
