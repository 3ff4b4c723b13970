"""The SageMaker Python SDK's own integration tests for training, unchanged, against
Runyard and moto: the acceptance suite for "SageMaker code runs here with only endpoints
and credentials changed".

The SDK's tests (``tests/conftest.py``, ``tests/integ``, ``tests/data`` of
aws/sagemaker-python-sdk, branch master-v2) lie in the workplace's
``../shared/sagemaker-sdk-tests`` beside the checkout (or where
``RUNYARD_TEST_SAGEMAKER_SDK_TESTS`` says); where they are absent, this module skips and
says so. Each test in scope runs in a pytest of its own, in the SDK's own environment
(``tests/e2e/sdk_venvs.py``: the SDK v2 and pytest 7, which its marked fixtures need), on a
copy of the tests that differs from them in three ways only, the ones their README allows:
- a conftest of Runyard's own beside them (``sagemaker_sdk_suite/conftest_for_sdk.py``):
  the SDK asks STS at AWS's own endpoint whatever ``AWS_ENDPOINT_URL_STS`` says;
- data the copy lacks, made in the same format and shape (``SYNTHETIC``);
- an empty ``tests/__init__.py``, which the SDK's repository has and the copy lacks (the
  SDK's environment ships a ``tests`` package of its own that would win otherwise).
What they talk to is set up as an account's would be: a Runyard server for SageMaker,
CloudWatch, CloudWatch Logs and STS, moto for S3, IAM and KMS, and the role
``SageMakerRole`` the tests name. A test passes here only when the SDK's pytest ran it
and it passed: a skip, an error or a run of nothing fails.

Which of the SDK's tests are in scope, and why the others are not, is in ``IN_SCOPE`` and
docs/sagemaker.md.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import boto3
import pytest

from tests.aws import MotoServer
from tests.e2e.conftest import REPO, Stack
from tests.e2e.sdk_venvs import sdk_python
from tests.timeouts import scaled
from tests.venvs import BUILD

pytestmark = pytest.mark.e2e

SDK_TESTS = Path(
    os.environ.get(
        "RUNYARD_TEST_SAGEMAKER_SDK_TESTS", REPO.parent / "shared" / "sagemaker-sdk-tests"
    )
)
HERE = Path(__file__).parent / "sagemaker_sdk_suite"
# The SDK's tests run in its default region, as in AWS's own CI.
REGION = "us-west-2"
ROLE = "SageMakerRole"
# The SDK's tests allow a training job 40 minutes; here one takes seconds to a minute, and
# the first of a framework's builds its image (minutes). A hang still fails within the
# test's own timeout, with what the server did.
RUN_TIMEOUT = 900

# The SDK's training tests that run here, by node id; the rest of its tests are out of
# scope (docs/sagemaker.md says why for each group).
IN_SCOPE = (
    # SDK v2 estimators: scikit-learn's script mode, with and without network isolation,
    # and a script that fails.
    "tests/integ/test_sklearn.py::test_training_with_additional_hyperparameters",
    "tests/integ/test_sklearn.py::test_training_with_network_isolation",
    "tests/integ/test_sklearn.py::test_failed_training_job",
    # The ModelTrainer (sagemaker.modules): the hyperparameter contract of a Python and a
    # shell script, from a dict, JSON and YAML; MPI and torchrun on two instances; a
    # source directory given as a tar.gz; a distributed driver of the script's own.
    "tests/integ/sagemaker/modules/train/test_model_trainer.py::test_source_dir_local_tar_file",
    "tests/integ/sagemaker/modules/train/test_model_trainer.py::test_hp_contract_basic_py_script",
    "tests/integ/sagemaker/modules/train/test_model_trainer.py::test_hp_contract_basic_sh_script",
    "tests/integ/sagemaker/modules/train/test_model_trainer.py::test_hp_contract_mpi_script",
    "tests/integ/sagemaker/modules/train/test_model_trainer.py::test_hp_contract_torchrun_script",
    "tests/integ/sagemaker/modules/train/test_model_trainer.py"
    "::test_hp_contract_hyperparameter_json",
    "tests/integ/sagemaker/modules/train/test_model_trainer.py"
    "::test_hp_contract_hyperparameter_yaml",
    "tests/integ/sagemaker/modules/train/test_model_trainer.py::test_custom_distributed_driver",
)

# Tests in scope that reach a place beyond the package registries, by what they need and
# why: they run where the machine reaches it, and skip saying so where it does not.
REACHES = {
    "tests/integ/sagemaker/modules/train/test_model_trainer.py::test_source_dir_local_tar_file": (
        "download.pytorch.org",
        "its code.tar.gz's requirements.txt pins torch==2.0.1+cpu from "
        "https://download.pytorch.org/whl/torch_stable.html",
    ),
}

# The server's settings, as an operator of a shared Runyard would set them for a team's
# SageMaker code: the SDK's ml.* CPU types on the local backend (a local instance has the
# machine's CPUs, whatever its type says).
CPU_TYPES = ("ml.m4.xlarge", "ml.m5.xlarge", "ml.c5.xlarge", "ml.c5.4xlarge")
SERVER_SETTINGS = {
    "RUNYARD_BACKENDS": ",".join(["local=local", *(f"{kind}=local" for kind in CPU_TYPES)]),
    # The ModelTrainer's tests name PyTorch 2.0.0's Deep Learning Container: that torch
    # from PyPI is a CUDA build of several GB, so this server runs it on its built-in
    # image (PyTorch 2.13), as an operator may choose (docs/images.md).
    "RUNYARD_IMAGE_ALIASES": json.dumps({"pytorch:2.0": "builtin"}),
    # Built images are kept between runs of the suite on one checkout, in the store the
    # other e2e servers build theirs in (each image is built once, under its own lock).
    "RUNYARD_IMAGE_STORE": str(BUILD / "e2e-images"),
}


def _mnist_digits(count: int, seed: int) -> dict[str, object]:
    """MNIST-shaped digits (28x28 uint8 images, flattened, and uint8 labels 0-9): each
    class a blob of its own place, with noise, so that a classifier has something to
    learn."""
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, count, dtype=np.uint8)
    grid = np.zeros((count, 28, 28), dtype=np.float32)
    rows, columns = np.divmod(labels.astype(int), 5)
    for index, (row, column) in enumerate(zip(rows, columns, strict=True)):
        top, left = 4 + row * 10, 2 + column * 5
        grid[index, top : top + 10, left : left + 5] = 200.0
    grid += rng.normal(0, 30, grid.shape)
    images = np.clip(grid, 0, 255).astype(np.uint8).reshape(count, 784)
    return {"x": images, "y": labels}


def _write_npz(path: Path, arrays: dict[str, object]) -> None:
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]


# The files the copy lacks (its ABSENT.txt) that a test in scope reads, made here.
SYNTHETIC = {
    "tests/data/sklearn_mnist/train/train.npz": lambda path: _write_npz(
        path, _mnist_digits(6000, seed=45)
    ),
}


@pytest.fixture(scope="module")
def sdk_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the SDK's tests with Runyard's conftest and the synthetic data."""
    if not (SDK_TESTS / "tests" / "integ").is_dir():
        pytest.skip(
            f"the SageMaker SDK's own tests are not at {SDK_TESTS} "
            "(RUNYARD_TEST_SAGEMAKER_SDK_TESTS names another place)"
        )
    root = tmp_path_factory.mktemp("sagemaker-sdk-tests")
    shutil.copytree(SDK_TESTS / "tests", root / "tests")
    for path in root.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)  # the shared copy is read-only
    (root / "tests" / "__init__.py").touch()
    shutil.copy(HERE / "conftest_for_sdk.py", root / "conftest.py")
    for name, make in SYNTHETIC.items():
        make(root / name)
    return root


@pytest.fixture(scope="module")
def aws(moto: MotoServer) -> MotoServer:
    """moto as the account the SDK's tests expect: the role they name exists."""
    moto.reset()
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "sagemaker.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    moto.client("iam", REGION).create_role(
        RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(trust)
    )
    return moto


@pytest.fixture(scope="module")
def suite_stack(tmp_path_factory: pytest.TempPathFactory, aws: MotoServer) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("runyard-sdk-suite")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}")
    # The server reaches S3 (moto) through boto3's standard settings.
    stack.env.update({**aws.client_env(), "AWS_DEFAULT_REGION": REGION})
    stack.env.update(SERVER_SETTINGS)
    stack.up()
    yield stack
    assert stack.down() == [], "processes of finished jobs were left running"


@pytest.fixture(scope="module")
def default_bucket(suite_stack: Stack, aws: MotoServer) -> str:
    """The SDK's default bucket (``sagemaker-<region>-<account>``, the account the caller's
    keys are in), which AWS's own test accounts hold already: the SDK's test session looks
    under a prefix of it, and takes a bucket that is not there for a refusal."""
    environment = sdk_environment(suite_stack, aws)
    sts = boto3.client(
        "sts",
        endpoint_url=environment["AWS_ENDPOINT_URL_STS"],
        region_name=REGION,
        aws_access_key_id=environment["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=environment["AWS_SECRET_ACCESS_KEY"],
    )
    name = f"sagemaker-{REGION}-{sts.get_caller_identity()['Account']}"
    aws.client("s3", REGION).create_bucket(
        Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    return name


def sdk_environment(stack: Stack, aws: MotoServer) -> dict[str, str]:
    """The environment of a notebook pointed at Runyard, as docs/sagemaker.md gives it,
    with moto as the rest of the account."""
    with stack.client() as client:
        keys = client.aws_credentials()
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RUNYARD_"))},
        "AWS_ACCESS_KEY_ID": keys["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": keys["secret_access_key"],
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL_SAGEMAKER": stack.url,
        "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS": stack.url,
        "AWS_ENDPOINT_URL_CLOUDWATCH": stack.url,
        "AWS_ENDPOINT_URL_STS": stack.url,
        # S3, IAM, KMS and anything else: the account's own.
        "AWS_ENDPOINT_URL": aws.url,
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
    }


def outcome(report: Path) -> tuple[str, str]:
    """(passed | failed | error | skipped | none, what the report says of it) of the one
    test a JUnit report holds."""
    cases = ElementTree.parse(report).getroot().iter("testcase")
    found = list(cases)
    if len(found) != 1:
        return "none", f"{len(found)} tests ran"
    for kind in ("failure", "error", "skipped"):
        element = found[0].find(kind)
        if element is not None:
            said = f"{element.get('message', '')}\n{element.text or ''}"
            return ("failed" if kind == "failure" else kind), said
    return "passed", ""


@pytest.mark.timeout(RUN_TIMEOUT + 120)
@pytest.mark.parametrize("node", IN_SCOPE, ids=lambda node: node.rsplit("::", 1)[-1])
def test_the_sdks_own_training_test_passes(
    node: str, sdk_tests: Path, suite_stack: Stack, aws: MotoServer, default_bucket: str
) -> None:
    if node in REACHES:
        host, why = REACHES[node]
        if not reachable(host):
            pytest.skip(f"this machine does not reach {host}, which the test needs: {why}")
    report = sdk_tests / f"report-{node.rsplit('::', 1)[-1]}.xml"
    command = [
        str(sdk_python("v2")),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        "-o",
        "junit_family=xunit2",
        "--tb=short",
        node,
    ]
    bound = scaled(RUN_TIMEOUT)
    try:
        done = subprocess.run(
            command,
            cwd=sdk_tests,
            env=sdk_environment(suite_stack, aws),
            capture_output=True,
            text=True,
            timeout=bound,
        )
        printed = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        printed = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else part or ""
            for part in (exc.stdout, exc.stderr)
        )
        pytest.fail(f"{node} ran {bound:.0f} s\n{printed[-6000:]}\n{suite_stack.unfinished()}")
    result, said = outcome(report) if report.exists() else ("none", "no report")
    assert result == "passed", (
        f"{node}: {result}: {said[-3000:]}\n--- the SDK's pytest ---\n{printed[-6000:]}\n"
        f"{latest_jobs(suite_stack)}\n{suite_stack.diagnostics()}"
    )


def reachable(host: str, port: int = 443, timeout: float = 5.0) -> bool:
    """Whether a TCP connection to ``host`` opens from this machine (as from a job's
    instance, whose way out is the machine's)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def latest_jobs(stack: Stack, count: int = 2) -> str:
    """What the newest jobs said: their status, reason and last lines."""
    parts = []
    with stack.client() as client:
        for item in client.list_jobs(limit=count)["items"]:
            job = client.get_job(item["name"])
            parts.append(
                stack.explain(job, [e for e in client.logs(item["name"]) if "message" in e])
            )
    return "\n".join(part.split("\n--- api ---")[0] for part in parts)
