"""TensorFlow script mode for real: the TensorFlow blocks of docs/distribution-modes.md
(2-instance parameter_server and multi_worker_mirrored_strategy jobs, run as written with
the CLI) through the real service, worker and local backend, with TensorFlow from PyPI in
the instances' environment; then what each job did, and what a stop and a failure leave."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from contract import storage
from contract.modes import enabled_mode
from provisioning.local import processes
from runyard.client import Client, admin_token
from tests.e2e.conftest import EXAMPLES, REPO, Stack
from tests.e2e.test_readme import BLOCK_TIMEOUT, blocks_of
from tests.tensorflow.environment import requirements
from tests.tensorflow.procs import tf_processes

pytestmark = pytest.mark.e2e

PS = {"parameter_server": {"enabled": True}}
# The page that shows the TensorFlow jobs, and how to get TensorFlow for them.
PAGE = "docs/distribution-modes.md"
JOB_TIMEOUT = 240
Ran = dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]


@pytest.fixture(scope="module")
def page_jobs(tf_stack: Stack) -> Ran:
    """The page's TensorFlow jobs, each block run as written against ``tf_stack``; by job
    name, each job and its log."""
    blocks = [block for block in blocks_of(PAGE) if "--framework tensorflow" in block.text]
    assert len(blocks) == 2, f"{PAGE} shows one block per TensorFlow mode"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")},
        "RUNYARD_URL": tf_stack.url,
        "RUNYARD_TOKEN": admin_token(tf_stack.home),
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    for block in blocks:
        shell = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", block.text],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
        assert shell.returncode == 0, f"{block} exited {shell.returncode}:\n{shell.stdout}"
    ran = {}
    with tf_stack.client() as client:
        for item in client.list_jobs(limit=100)["items"]:
            job = client.get_job(str(item["name"]))
            ran[job["name"]] = (job, list(client.logs(job["name"])))
    for job, events in ran.values():
        assert job["status"] == "Completed", tf_stack.explain(job, events)
        assert processes.marked_processes(job["id"]) == []
    assert tf_processes(tf_stack.python, tf_stack.job_ids()) == {}
    return ran


def _lines(events: list[dict[str, Any]], host: str | None = None) -> list[str]:
    return [str(e["message"]) for e in events if "message" in e and host in (None, e.get("host"))]


def _model_files(job: dict[str, Any]) -> list[str]:
    with tarfile.open(storage.local_path(job["model_artifacts"])) as tar:
        return tar.getnames()


def test_the_page_blocks_ran_every_tensorflow_mode(page_jobs: Ran) -> None:
    assert sorted(page_jobs) == ["tf-mwms", "tf-ps", "tf-ps-v1"]
    modes = {
        name: getattr(enabled_mode(job["spec"]["distribution"]), "name", None)
        for name, (job, _) in page_jobs.items()
    }
    assert modes == {
        "tf-mwms": "multi_worker_mirrored_strategy",
        "tf-ps": "parameter_server",
        "tf-ps-v1": "parameter_server",
    }
    # How the page gets TensorFlow into a job is how these tests get it.
    [install] = [
        block
        for block in blocks_of(PAGE)
        if "pip install" in block.text and "tensorflow" in block.text
    ]
    assert "'.[tensorflow]'" in install.text
    assert requirements()


def test_parameter_server_strategy_trains_a_keras_model_and_the_chief_saves_it(
    page_jobs: Ran,
) -> None:
    job, events = page_jobs["tf-ps"]
    chief, worker = _lines(events, "algo-1"), _lines(events, "algo-2")
    # SageMaker's TF_CONFIG: algo-1 the master (the script's chief), algo-2 a worker, a ps
    # task on each; the chief's steps ran on algo-2's worker.
    assert "chief: 1 worker(s), 2 ps task(s)" in chief, chief
    assert any(re.fullmatch(r"worker 0 serving at grpc://\S+:\d+", x) for x in worker), worker
    assert "the chief is done" in worker
    [final] = [line for line in chief if line.startswith("final loss ")]
    assert float(final.split()[2]) < 0.2
    # algo-2 kept its ps task until the master was done.
    assert any(line.startswith("The master at ") and "is done" in line for line in worker)
    assert "model.keras" in _model_files(job)


def test_a_tensorflow_1_script_trains_asynchronously_on_both_instances(
    page_jobs: Ran,
) -> None:
    """Written as the seed article's scripts are: only TF_CONFIG and SM_*, every instance
    trains, variables on the ps tasks Runyard runs."""
    job, events = page_jobs["tf-ps-v1"]
    took = {
        host: [line for line in _lines(events, host) if " took " in line]
        for host in ("algo-1", "algo-2")
    }
    [master], [worker] = took["algo-1"], took["algo-2"]
    assert master.startswith("master 0 took ")
    assert worker.startswith("worker 0 took ")
    # One global step shared through the ps tasks: each took a part of it.
    mine = [int(line.split()[3]) for line in (master, worker)]
    assert min(mine) > 0, (master, worker)
    assert sum(mine) >= 400, (master, worker)
    [final] = [line for line in _lines(events, "algo-1") if line.startswith("final loss ")]
    assert float(final.split()[2]) < 0.2
    assert {"model.ckpt.index", "checkpoint"} <= set(_model_files(job))


def test_multi_worker_mirrored_strategy_workers_end_with_the_same_weights(
    page_jobs: Ran,
) -> None:
    job, events = page_jobs["tf-mwms"]
    digests = {
        host: [line.split()[-1] for line in _lines(events, host) if "weights sha256" in line]
        for host in ("algo-1", "algo-2")
    }
    assert len(digests["algo-1"]) == 1, digests
    assert digests["algo-1"] == digests["algo-2"], digests
    finals = [line for line in _lines(events) if " final loss " in line]
    assert len(finals) == 2
    assert all(float(line.split()[4]) < 0.2 for line in finals), finals
    assert "model.keras" in _model_files(job)


def _wait_for_line(client: Client, name: str, text: str, timeout: float = JOB_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in _lines(list(client.logs(name)))):
        job = client.get_job(name)
        assert job["status"] == "InProgress", f"{name} ended: {job['failure_reason']}"
        assert time.monotonic() < deadline, f"{name} never printed {text!r}"
        time.sleep(0.5)


def test_a_stop_ends_the_parameter_servers_too(tf_stack: Stack) -> None:
    with tf_stack.client() as client:
        job = tf_stack.submit(
            client,
            "tensorflow-ps",
            name="tf-pss-stopped",
            framework="tensorflow",
            instance_count=2,
            entry_point="train.py",
            distribution=PS,
            hyperparameters={"steps": 10_000_000},
        )
        _wait_for_line(client, job["name"], "first step done")
        running = tf_processes(tf_stack.python, tf_stack.job_ids())
        ps_tasks = [line for line in running.values() if "tensorflow_ps" in line]
        assert len(ps_tasks) == 2, running  # the check below can see them
        client.stop_job(job["name"])
        job = tf_stack.wait_until_ended(client, job["name"], timeout=JOB_TIMEOUT)
    assert job["status"] == "Stopped"
    assert processes.marked_processes(job["id"]) == []
    assert tf_processes(tf_stack.python, tf_stack.job_ids()) == {}


def test_a_failed_worker_fails_the_job_and_ends_every_tensorflow_process(
    tf_stack: Stack, tmp_path: Path
) -> None:
    source = tmp_path / "failing"
    shutil.copytree(EXAMPLES / "tensorflow-ps", source)
    # The example, but its worker dies once the chief has started training.
    (source / "fail_worker.py").write_text(
        "import sys\n"
        "import train\n"
        "config = train.tf2_config()\n"
        "if config['task']['type'] == 'worker':\n"
        "    import tensorflow as tf\n"
        "    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()\n"
        "    server = tf.distribute.Server(resolver.cluster_spec(), 'worker', 0)\n"
        "    print('worker serving', flush=True)\n"
        "    import os, time; time.sleep(8)\n"
        # At once: sys.exit would tear the in-process server down first, and the chief,
        # failing on its loss, could end before this process did.
        "    print('the worker lost its footing', file=sys.stderr, flush=True)\n"
        "    os._exit(1)\n"
        "sys.argv += ['--steps', '10000000']\n"
        "train.main()\n"
    )
    with tf_stack.client() as client:
        job = tf_stack.submit(
            client,
            source,
            name="tf-pss-failed",
            framework="tensorflow",
            instance_count=2,
            entry_point="fail_worker.py",
            distribution=PS,
        )
        _wait_for_line(client, job["name"], "worker serving")
        running = tf_processes(tf_stack.python, tf_stack.job_ids())
        assert len([line for line in running.values() if "tensorflow_ps" in line]) == 2, running
        job = tf_stack.wait_until_ended(client, job["name"], timeout=JOB_TIMEOUT)
    assert job["status"] == "Failed"
    assert "the worker lost its footing" in job["failure_reason"]
    assert processes.marked_processes(job["id"]) == []
    assert tf_processes(tf_stack.python, tf_stack.job_ids()) == {}
