"""SageMaker's own training toolkit (``sagemaker-training`` from PyPI), installed in a job
through its requirements.txt as a user would, reads the instance it runs on as SageMaker's.

The toolkit and what it needs come from a wheelhouse made once per machine
(``tests.toolkit_wheels``), which the job's requirements.txt installs from.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import Stack
from tests.toolkit_wheels import BUILD_TIMEOUT, wheelhouse

pytestmark = pytest.mark.e2e

RUN_TIMEOUT = 600

SCRIPT = """
import json, os
from sagemaker_training import entry_point, environment

# What the toolkit's own launcher does first: wait until every host's name resolves.
entry_point._wait_hostname_resolution()
env = environment.Environment()
print("toolkit " + json.dumps({
    "base_dir": environment.base_dir,
    "hosts": env.hosts,
    "current_host": env.current_host,
    "hyperparameters": env.hyperparameters,
    "channel_input_dirs": env.channel_input_dirs,
    "channel_files": sorted(os.listdir(env.channel_input_dirs["train"])),
    "model_dir": env.model_dir,
    "network_interface_name": env.network_interface_name,
}), flush=True)
"""


@pytest.fixture(scope="session")
def toolkit_wheels() -> Path:
    return wheelhouse()


# The wheelhouse is made in this test's setup, and its time counts against the test's.
@pytest.mark.timeout(BUILD_TIMEOUT + RUN_TIMEOUT + 300)
def test_the_toolkit_reads_the_instance_as_sagemakers(
    stack: Stack, toolkit_wheels: Path, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(SCRIPT))
    (source / "requirements.txt").write_text(
        f"--no-index\n--find-links {toolkit_wheels}\nsagemaker-training\n"
    )
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    with stack.client() as client:
        job = stack.submit(
            client,
            source,
            entry_point="train.py",
            instance_count=2,
            hyperparameters={"epochs": 3, "optimizer": "sgd"},
            inputs={"train": data.as_uri()},
        )
        job = stack.wait_until_ended(client, job["name"], timeout=RUN_TIMEOUT)
        events = list(client.logs(job["name"]))
    assert job["status"] == "Completed", stack.explain(job, events)
    seen = {
        event["host"]: json.loads(event["message"].removeprefix("toolkit "))
        for event in events
        if event["message"].startswith("toolkit ")
    }
    assert sorted(seen) == ["algo-1", "algo-2"]
    for host, toolkit in seen.items():
        assert toolkit == {
            "base_dir": "/opt/ml",
            "hosts": ["algo-1", "algo-2"],
            "current_host": host,
            "hyperparameters": {"epochs": 3, "optimizer": "sgd"},
            "channel_input_dirs": {"train": "/opt/ml/input/data/train"},
            "channel_files": ["part-0.csv"],
            "model_dir": "/opt/ml/model",
            "network_interface_name": "eth0",
        }
