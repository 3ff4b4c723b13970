"""The SDK's estimator against the API in this process, used as SageMaker code uses its
own: fit(wait=False) and latest_training_job, attach(), logs(), training_job_analytics,
tags and metric definitions in SageMaker's spelling."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from runyard import Client, Estimator, JobFailedError
from runyard.analytics import TrainingJobAnalytics
from runyard.pytorch import PyTorch
from runyard.tensorflow import TensorFlow
from runyard.training_job import TrainingJob as TrainingJobHandle
from service.jobs.models import TrainingJob
from service.jobs.schemas import JobCreate
from service.kit.db import session_scope
from service.settings import Settings
from tests.conftest import InstanceHeaders
from tests.runyard.in_process import InProcessClient

LOSS = {"Name": "train:loss", "Regex": r"loss: ([0-9.]+)"}
ACCURACY = {"Name": "valid:acc", "Regex": r"acc=([0-9.]+)"}


@pytest.fixture
def client(api: TestClient) -> InProcessClient:
    return InProcessClient(api)


def _estimator(client: InProcessClient, source_dir: Path, **arguments: Any) -> PyTorch:
    return PyTorch(
        entry_point="train.py",
        source_dir=source_dir,
        framework_version="2.13",
        instance_type="local",
        base_job_name="sdk",
        client=client,
        **arguments,
    )


def _latest(estimator: Estimator) -> TrainingJobHandle:
    job = estimator.latest_training_job
    assert job is not None, "fit() or attach() sets it"
    return job


def _line(seq: int, minute: int, second: int, message: str) -> dict[str, Any]:
    time = f"2026-01-01T00:{minute:02d}:{second:02d}Z"
    return {"seq": seq, "time": time, "stream": "stdout", "message": message}


def _ship(api: TestClient, settings: Settings, name: str, *lines: dict[str, Any]) -> None:
    headers = InstanceHeaders(settings, api.get(f"/v1/training-jobs/{name}").json()["id"])
    shipped = api.post(
        f"/v1/training-jobs/{name}/instances/algo-1/logs",
        json={"lines": list(lines)},
        headers=headers,
    )
    assert shipped.status_code == 200, shipped.text


def _end(settings: Settings, name: str, status: str, **fields: Any) -> None:
    """What the worker records when the job ends (no worker runs in these tests)."""
    with session_scope(settings.database_url) as session:
        session.execute(
            update(TrainingJob)
            .where(TrainingJob.name == name)
            .values(status=status, secondary_status=status, **fields)
        )


def test_fit_without_waiting_names_the_job_and_sends_sagemakers_tags_and_metrics(
    api: TestClient, client: InProcessClient, source_dir: Path
) -> None:
    printed: list[str] = []
    estimator = _estimator(
        client,
        source_dir,
        tags=[{"Key": "team", "Value": "nlp"}, {"Key": "stage", "Value": ""}],
        metric_definitions=[LOSS, ACCURACY],
    )
    assert estimator.latest_training_job is None
    job = estimator.fit(wait=False, echo=printed.append)
    name = _latest(estimator).name
    assert name == job["name"]
    assert name.startswith("sdk-")
    assert printed == [f"Submitted training job {name}"]
    spec = api.get(f"/v1/training-jobs/{name}").json()["spec"]
    assert spec["tags"] == [{"key": "team", "value": "nlp"}, {"key": "stage", "value": ""}]
    assert spec["metric_definitions"] == [
        {"name": "train:loss", "regex": r"loss: ([0-9.]+)"},
        {"name": "valid:acc", "regex": r"acc=([0-9.]+)"},
    ]
    assert _latest(estimator).describe()["status"] == "InProgress"
    assert estimator.model_data is None

    # Tags as a plain dict, which SageMaker's estimators also take.
    other = _estimator(client, source_dir, tags={"team": "vision"})
    other.fit(wait=False, echo=printed.append)
    tagged = api.get("/v1/training-jobs", params={"tag": "team=vision"}).json()["items"]
    assert [item["name"] for item in tagged] == [_latest(other).name]


def test_logs_prints_every_line_then_the_summary_and_attach_binds_the_job(
    api: TestClient, settings: Settings, client: InProcessClient, source_dir: Path
) -> None:
    estimator = _estimator(
        client, source_dir, hyperparameters={"epochs": 3}, metric_definitions=[LOSS]
    )
    estimator.fit(wait=False, echo=lambda _line: None)
    name = _latest(estimator).name
    _ship(api, settings, name, _line(1, 0, 1, "epoch 1 loss: 0.9"), _line(2, 0, 2, "done"))
    model = f"file:///models/{name}/output/model.tar.gz"
    _end(settings, name, "Completed", model_artifacts=model)

    printed: list[str] = []
    estimator.logs(echo=printed.append)
    assert printed[:3] == [
        "[algo-1] epoch 1 loss: 0.9",
        "[algo-1] done",
        f"Training job {name} ended: Completed (Completed)",
    ]
    assert estimator.model_data == model

    attached = PyTorch.attach(name, client=client)
    assert attached.latest_training_job is not None
    assert attached.latest_training_job.name == name
    assert attached.model_data == model
    assert attached.spec["hyperparameters"] == {"epochs": 3}
    assert attached.spec["metric_definitions"] == [
        {"name": "train:loss", "regex": r"loss: ([0-9.]+)"}
    ]
    assert attached.spec["framework_version"] == "2.13"
    # Fitting it again submits the job's stored code under a name of the same base.
    again = attached.fit(wait=False, echo=lambda _line: None)
    assert again["name"].startswith("sdk-")
    assert again["name"] != name
    first = api.get(f"/v1/training-jobs/{name}").json()["spec"]
    assert (again["spec"]["source_uri"], again["spec"]["entry_point"]) == (
        first["source_uri"],
        "train.py",
    )
    # The base estimator attaches to any framework's job; a framework's to its own only.
    assert Estimator.attach(name, client=client).spec["framework"] == "pytorch"
    with pytest.raises(ValueError, match=f"training job {name} is a pytorch job, not tensorflow"):
        TensorFlow.attach(name, client=client)


def test_waiting_on_a_failed_job_raises_and_on_a_stopped_one_warns(
    api: TestClient,
    settings: Settings,
    client: InProcessClient,
    source_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing = _estimator(client, source_dir)
    failing.fit(wait=False, echo=lambda _line: None)
    failed = _latest(failing).name
    _end(settings, failed, "Failed", failure_reason="ValueError: bad batch size")
    with pytest.raises(JobFailedError, match="ended Failed: ValueError: bad batch size"):
        PyTorch.attach(failed, client=client)
    with pytest.raises(JobFailedError):
        failing.logs(echo=lambda _line: None)

    stopping = _estimator(client, source_dir)
    stopping.fit(wait=False, echo=lambda _line: None)
    stopped = _latest(stopping).name
    api.post(f"/v1/training-jobs/{stopped}/stop")
    with caplog.at_level(logging.WARNING, logger="runyard"):
        attached = PyTorch.attach(stopped, client=client)
    assert _latest(attached).describe()["status"] == "Stopped"
    assert [record.getMessage() for record in caplog.records] == [
        f"training job {stopped} ended Stopped rather than Completed (Stopped): check that it "
        "did what you expected"
    ]


def test_an_estimator_without_a_job_says_so() -> None:
    # Nothing here reaches a server.
    estimator = Estimator("train.py", instance_type="local", client=Client("http://127.0.0.1:9"))
    for use in (estimator.logs, lambda: estimator.training_job_analytics):
        with pytest.raises(ValueError, match="not associated with a training job"):
            use()


def test_training_job_analytics_averages_each_metric_per_minute(
    api: TestClient, settings: Settings, client: InProcessClient, source_dir: Path
) -> None:
    estimator = _estimator(client, source_dir, metric_definitions=[LOSS, ACCURACY])
    estimator.fit(wait=False, echo=lambda _line: None)
    name = _latest(estimator).name
    _ship(
        api,
        settings,
        name,
        _line(1, 0, 5, "loss: 0.9"),
        _line(2, 0, 35, "loss: 0.7"),
        _line(3, 1, 10, "loss: 0.5 acc=0.8"),
        _line(4, 3, 0, "acc=0.9"),
    )
    analytics = estimator.training_job_analytics
    frame = analytics.dataframe()
    assert list(frame.columns) == ["timestamp", "metric_name", "value"]
    rows = [tuple(row) for row in frame.itertuples(index=False)]
    # Each metric's periods from its own first one, as the SDK counts them.
    assert rows == [
        (0.0, "train:loss", pytest.approx(0.8)),
        (60.0, "train:loss", 0.5),
        (0.0, "valid:acc", 0.8),
        (120.0, "valid:acc", 0.9),
    ]
    assert analytics.dataframe() is frame  # kept until asked again
    assert analytics.name == name

    halves = TrainingJobAnalytics(name, metric_names=["train:loss"], period=30, client=client)
    assert [tuple(row) for row in halves.dataframe().itertuples(index=False)] == [
        (0.0, "train:loss", 0.9),
        (30.0, "train:loss", 0.7),
        (60.0, "train:loss", 0.5),
    ]
    csv = source_dir.parent / "metrics.csv"
    halves.export_csv(csv)
    assert csv.read_text().splitlines()[0] == ",timestamp,metric_name,value"


def test_training_job_analytics_without_pandas_says_what_to_install(
    client: InProcessClient, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    estimator = _estimator(client, source_dir, metric_definitions=[LOSS])
    estimator.fit(wait=False, echo=lambda _line: None)
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install 'runyard\[analytics\]'"):
        estimator.training_job_analytics.dataframe()


def test_network_isolation_is_asked_for_only_when_wanted(
    api: TestClient, client: InProcessClient, source_dir: Path
) -> None:
    open_network = _estimator(client, source_dir)
    assert open_network.enable_network_isolation() is False
    open_network.fit(wait=False, echo=lambda _line: None)
    isolated = _estimator(client, source_dir, enable_network_isolation=True)
    assert isolated.enable_network_isolation() is True
    assert isolated.spec["enable_network_isolation"] is True


@pytest.mark.skipif(
    "enable_network_isolation" not in JobCreate.model_fields,
    reason="the REST API has no enable_network_isolation field yet",
)
def test_network_isolation_reaches_the_job(
    api: TestClient, client: InProcessClient, source_dir: Path
) -> None:
    isolated = _estimator(client, source_dir, enable_network_isolation=True)
    job = isolated.fit(wait=False, echo=lambda _line: None)
    assert api.get(f"/v1/training-jobs/{job['name']}").json()["spec"]["enable_network_isolation"]
    api.post(f"/v1/training-jobs/{job['name']}/stop")
    assert PyTorch.attach(job["name"], client=client).enable_network_isolation() is True


def test_disable_output_compression_reaches_the_job_and_an_attached_estimator(
    api: TestClient, settings: Settings, client: InProcessClient, source_dir: Path
) -> None:
    assert _estimator(client, source_dir).spec["output_compression"] is None
    estimator = _estimator(client, source_dir, disable_output_compression=True)
    job = estimator.fit(wait=False, echo=lambda _line: None)
    spec = api.get(f"/v1/training-jobs/{job['name']}").json()["spec"]
    assert spec["output_compression"] == "NONE"
    prefix = f"file:///models/{job['name']}/output/model/"
    _end(settings, job["name"], "Completed", model_artifacts=prefix)
    # As the SageMaker SDK's model_data gives an uncompressed model.
    source = {"S3Uri": prefix, "S3DataType": "S3Prefix", "CompressionType": "None"}
    assert estimator.model_data == {"S3DataSource": source}
    attached = PyTorch.attach(job["name"], client=client)
    assert attached.spec["output_compression"] == "NONE"
    assert attached.model_data == {"S3DataSource": source}


def test_tensorboard_output_config_reaches_the_job_and_an_attached_estimator(
    api: TestClient, client: InProcessClient, source_dir: Path
) -> None:
    # As the SageMaker SDK's TensorBoardOutputConfig: an object with these two attributes.
    stored = (source_dir.parent / "tb").as_uri()
    config = SimpleNamespace(s3_output_path=stored, container_local_output_path="/opt/ml/output/tb")
    estimator = _estimator(client, source_dir, tensorboard_output_config=config)
    assert estimator.latest_job_tensorboard_artifacts_path() is None  # no job yet
    job = estimator.fit(wait=False, echo=lambda _line: None)
    spec = api.get(f"/v1/training-jobs/{job['name']}").json()["spec"]
    assert (spec["tensorboard_s3_output_path"], spec["tensorboard_local_path"]) == (
        stored,
        "/opt/ml/output/tb",
    )
    expected = f"{stored}/{job['name']}/tensorboard-output"
    assert estimator.latest_job_tensorboard_artifacts_path() == expected
    api.post(f"/v1/training-jobs/{job['name']}/stop")
    attached = PyTorch.attach(job["name"], client=client)
    assert attached.spec["tensorboard_local_path"] == "/opt/ml/output/tb"
    assert attached.latest_job_tensorboard_artifacts_path() == expected
    with pytest.raises(ValueError, match="s3_output_path"):
        _estimator(client, source_dir, tensorboard_output_config={"s3_output_path": ""})


def test_a_framework_estimator_attaches_with_its_own_arguments(
    api: TestClient, client: InProcessClient, source_dir: Path
) -> None:
    estimator = TensorFlow(
        "py311",
        "2.20",
        "s3://bucket/model",
        entry_point="train.py",
        source_dir=source_dir,
        instance_type="local",
        instance_count=2,
        client=client,
    )
    job = estimator.fit(wait=False, echo=lambda _line: None)
    api.post(f"/v1/training-jobs/{job['name']}/stop")
    attached = TensorFlow.attach(job["name"], client=client)
    assert attached.spec["framework"] == "tensorflow"
    assert (attached.spec["py_version"], attached.spec["framework_version"]) == ("py311", "2.20")
    assert attached.spec["hyperparameters"] == {"model_dir": "s3://bucket/model"}
    assert attached.spec["instance_count"] == 2
