"""SageMaker's own training toolkit (``sagemaker-training`` from PyPI), installed in a job
through its requirements.txt as a user would, reads the instance it runs on as SageMaker's.

The toolkit and what it needs are fetched from PyPI once per machine into a wheelhouse
(``~/.cache/runyard-tests``) that the job's requirements.txt installs from. A wheelhouse
counts only once it is whole: it is made beside its place, marked, then moved there.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

WHEELHOUSE = Path.home() / ".cache" / "runyard-tests" / "sagemaker-training"
# Written last into a wheelhouse that pip made in full.
MADE = ".made"
# A cold build fetches a few dozen wheels from PyPI and may compile some.
BUILD_TIMEOUT = 1200
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
    """The toolkit and every package it needs, as wheels, made once per machine. Making
    them may fail (no way to PyPI): then the test fails with pip's error, never skips."""
    WHEELHOUSE.parent.mkdir(parents=True, exist_ok=True)
    with open(WHEELHOUSE.parent / "sagemaker-training.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be making it now
        if not (WHEELHOUSE / MADE).is_file():
            _make_wheelhouse()
    return WHEELHOUSE


def _make_wheelhouse() -> None:
    """Made in a directory of its own beside WHEELHOUSE, then moved there whole: an
    interrupted build leaves nothing that reads as made."""
    making = Path(tempfile.mkdtemp(prefix=".making-", dir=WHEELHOUSE.parent))
    try:
        making.chmod(0o755)  # as a directory made the usual way: jobs read from it
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "sagemaker-training",
             "--wheel-dir", str(making)],
            check=True,
            timeout=BUILD_TIMEOUT,
        )  # fmt: skip
        if not list(making.glob("sagemaker_training-*.whl")):
            pytest.fail(f"pip made no sagemaker_training wheel in {making}")
        (making / MADE).write_text("")
        # A wheelhouse without the mark: an interrupted build's, or one made before marks.
        shutil.rmtree(WHEELHOUSE, ignore_errors=True)
        making.rename(WHEELHOUSE)
    finally:
        shutil.rmtree(making, ignore_errors=True)


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
