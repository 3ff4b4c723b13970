"""A framework version SageMaker has images of, which the package index has no build of for
the server's Python (torch 1.12 on Python 3.11): accepted, run on the nearest catalog image,
and said so in the job's log, its describe (REST, the CLI) and DescribeTrainingJob.

Through the real service, worker and local backend. The server's pip installs from a
directory of small wheels, where pip's answer for torch 1.12.1 is "no matching
distribution", and its catalog's CPU PyTorch image is replaced by a small one of the same
name (RUNYARD_IMAGES), so that the stand-in builds in seconds."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.e2e.conftest import Stack, log_lines
from tests.wheels import make_wheel, offline

pytestmark = pytest.mark.e2e

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
STAND_IN = f"pytorch-training:2.13.0-cpu-py{PYTHON.replace('.', '')}"
SCRIPT = """
import runyard_probe
print("probe", runyard_probe.VALUE, flush=True)
"""


@pytest.fixture(scope="module")
def versions_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    wheels = tmp_path_factory.mktemp("wheels") / "wheels"
    make_wheel(wheels, "runyard_probe", "1.0", "VALUE = 'stood in'\n")
    home = tmp_path_factory.mktemp("runyard-versions")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'b.db'}")
    stack.env["RUNYARD_IMAGES"] = json.dumps(
        [
            {
                "framework": "pytorch",
                "framework_version": "2.13.0",
                "python": PYTHON,
                "packages": ["runyard_probe==1.0"],
            }
        ]
    )
    # The server's pip configuration: the wheels alone, for its builds and its questions.
    stack.env.update(offline(wheels))
    stack.env["PIP_CONSTRAINT"] = "/dev/null"
    yield stack.up()
    assert stack.down() == [], "processes of finished jobs were left running"


def test_a_version_the_index_cannot_install_runs_on_the_nearest_image_and_says_so(
    versions_stack: Stack, tmp_path: Path
) -> None:
    source = tmp_path / "code"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(SCRIPT))
    name = "pinned-to-1-12"
    with versions_stack.client() as client:
        # As a notebook pins it: the SDK's short form, and the Python of SageMaker's image.
        created = versions_stack.submit(
            client,
            source,
            name=name,
            entry_point="train.py",
            framework_version="1.12",
            py_version="py38",
        )
        assert created["image"] == f"pytorch-training:1.12.1-cpu-py{PYTHON.replace('.', '')}"
        job = versions_stack.wait_until_ended(client, name, timeout=300)
        lines = log_lines(client, name)
        keys = client.aws_credentials()
    assert job["status"] == "Completed", versions_stack.explain(job)
    assert "probe stood in" in lines
    assert job["image"] == STAND_IN
    assert job["image_requested"] == "pytorch 1.12 (py38)"
    stand_in = (
        f"torch==1.12.1 cannot be installed for Python {PYTHON} from this server's package "
        "index (pip: Could not find a version that satisfies the requirement torch==1.12.1 "
        f"(from versions: none)): the job runs on {STAND_IN}, the nearest image of the catalog"
    )
    assert job["image_note"] == (
        f"py38 was asked for; the image of pytorch 1.12.1 is made for this server's Python, "
        f"{PYTHON}; {stand_in}"
    )
    # The job's log says it before anything else of the instance's.
    assert stand_in in lines
    assert lines.index(stand_in) < lines.index("probe stood in")
    described = subprocess.run(
        [sys.executable, "-m", "runyard", "describe", name],
        env=versions_stack.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"Image:            {STAND_IN} (asked for: pytorch 1.12 (py38))" in described
    assert "Image note:       py38 was asked for; " in described
    sm = boto3.client(
        "sagemaker",
        endpoint_url=versions_stack.url,
        region_name="us-east-1",
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
    )
    transitions = sm.describe_training_job(TrainingJobName=name)["SecondaryStatusTransitions"]
    (launch,) = [t for t in transitions if t["Status"] == "LaunchingMLInstances"]
    assert launch["StatusMessage"].endswith(stand_in)
