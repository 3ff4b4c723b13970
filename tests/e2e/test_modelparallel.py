"""Model-parallel jobs through the real service, worker and local backend: SageMaker's
sharded-data-parallel example shape, submitted with its estimator's ``distribution``."""

from __future__ import annotations

import json
import os
import signal
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from runyard.client import Client
from tests.e2e.conftest import Stack
from tests.e2e.conftest import log_lines as _lines

pytestmark = pytest.mark.e2e

# The seed's estimator, scaled to 2 instances x 2 processes: model states sharded in
# groups of 2 (one per instance), replicated across the two.
SEED_DISTRIBUTION = {
    "mpi": {
        "enabled": True,
        "processes_per_host": 2,
        "custom_mpi_options": "-x NCCL_DEBUG=WARN -x SMDEBUG_LOG_LEVEL=ERROR",
    },
    "smdistributed": {
        "modelparallel": {
            "enabled": True,
            "parameters": {
                "ddp": True,
                "skip_tracing": True,
                "delayed_parameter_initialization": True,
                "offload_activations": True,
                "activation_loading_horizon": 4,
                "sharded_data_parallel_degree": 2,
                "fp16": False,
                "bf16": False,
                "partitions": 1,
            },
        }
    },
}
# The same script in 2 pipeline stages (one per process of an instance), replicated on
# the two instances.
PIPELINE_DISTRIBUTION = {
    "mpi": {"enabled": True, "processes_per_host": 2},
    "smdistributed": {
        "modelparallel": {
            "enabled": True,
            "parameters": {"partitions": 2, "microbatches": 4, "ddp": True},
        }
    },
}
# A transformers GPT-2 in 2 pipeline stages, each split over 2 ranks (tensor parallelism
# inside the stages): cluster placement puts a stage's two ranks on the two instances.
TRANSFORMERS_DISTRIBUTION = {
    "mpi": {"enabled": True, "processes_per_host": 2},
    "smdistributed": {
        "modelparallel": {
            "enabled": True,
            "parameters": {"partitions": 2, "tensor_parallel_degree": 2, "microbatches": 2},
        }
    },
}
STEPS = 24


@pytest.fixture(scope="module")
def mp_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("runyard-modelparallel")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}")
    stack.env.update({"RUNYARD_RESTART_BACKOFF_SECONDS": "0.5"})
    stack.up()
    yield stack
    assert stack.down() == [], "processes of finished jobs were left running"


def _submit(
    stack: Stack,
    client: Client,
    tmp_path: Path,
    name: str,
    distribution: dict[str, Any] = SEED_DISTRIBUTION,
    **hp: Any,
) -> str:
    job = stack.submit(
        client,
        "modelparallel-gpt",
        name=name,
        entry_point="train_gpt_simple.py",
        instance_count=2,
        distribution=distribution,
        hyperparameters={"max_steps": STEPS, "checkpoint_every": 4, **hp},
        checkpoint_s3_uri=(tmp_path / name / "checkpoints").as_uri(),
        output_path=(tmp_path / name / "output").as_uri(),
    )
    return str(job["name"])


def _model(job: dict[str, Any], tmp_path: Path) -> dict[str, torch.Tensor]:
    with tarfile.open(job["model_artifacts"].removeprefix("file://")) as archive:
        archive.extract("model.pt", tmp_path / job["name"], filter="data")
    state: dict[str, torch.Tensor] = torch.load(tmp_path / job["name"] / "model.pt")
    return state


def _losses(lines: list[str]) -> dict[int, float]:
    found = {}
    for line in lines:
        words = line.split()
        if len(words) >= 4 and words[-4] == "step" and words[-2] == "loss":
            found[int(words[-3])] = float(words[-1])
    return found


def _stored_step(checkpoints: Path) -> int:
    """The step of the newest checkpoint in storage (-1 before the first)."""
    try:
        return int((checkpoints / "newest").read_text().removeprefix("step-"))
    except (FileNotFoundError, ValueError):
        return -1


@pytest.mark.parametrize(
    ("name", "distribution", "said"),
    [
        ("gpt-sharded", SEED_DISTRIBUTION, "activations stay in host memory on CPU"),
        ("gpt-pipeline", PIPELINE_DISTRIBUTION, "pipeline stages begin at: blocks.1"),
    ],
)
def test_the_seed_script_shape_trains_as_a_job(
    mp_stack: Stack, tmp_path: Path, name: str, distribution: dict[str, Any], said: str
) -> None:
    with mp_stack.client() as client:
        name = _submit(mp_stack, client, tmp_path, name, distribution)
        job = mp_stack.wait_until_ended(client, name, timeout=300)
        lines = _lines(client, name)
        assert job["status"] == "Completed", mp_stack.explain(job, list(client.logs(name)))
    # The parameters reached the script as SageMaker's SDK sends them.
    parameters = distribution["smdistributed"]["modelparallel"]["parameters"]
    assert job["spec"]["hyperparameters"]["mp_parameters"] == parameters
    losses = _losses(lines)
    assert sorted(losses) == list(range(STEPS)), lines
    assert losses[STEPS - 1] < losses[0] / 2, losses
    assert any("test loss" in line for line in lines)
    assert any(said in line for line in lines), lines
    # The model is whole (gathered from its shards), not one rank's part.
    model = _model(job, tmp_path)
    assert model["token.weight"].shape == (64, 64)
    assert any(key.startswith("blocks.1.") for key in model)


def test_a_killed_instance_resumes_from_the_sharded_checkpoint(
    mp_stack: Stack, tmp_path: Path
) -> None:
    with mp_stack.client() as client:
        whole = _submit(mp_stack, client, tmp_path, "gpt-whole", step_seconds=0.0)
        cut = _submit(mp_stack, client, tmp_path, "gpt-killed", step_seconds=0.4)
        # Read from storage, not from the logs, which may come seconds late on a busy
        # machine: the kill must land while the job still has steps to train.
        deadline = time.monotonic() + 240
        while _stored_step(tmp_path / cut / "checkpoints") < 7:
            assert time.monotonic() < deadline, mp_stack.diagnostics()
            time.sleep(0.05)
        # algo-2's machine dies with its two ranks' shards in memory.
        pid_file = mp_stack.home / "jobs" / client.get_job(cut)["id"] / "algo-2.pid.json"
        os.killpg(json.loads(pid_file.read_text())["pid"], signal.SIGKILL)
        killed = mp_stack.wait_until_ended(client, cut, timeout=300)
        lines = _lines(client, cut)
        assert killed["status"] == "Completed", mp_stack.explain(killed, list(client.logs(cut)))
        uninterrupted = mp_stack.wait_until_ended(client, whole, timeout=300)
        assert uninterrupted["status"] == "Completed"
    assert killed["infrastructure_restarts"] == 1, (killed["transitions"], lines)
    resumed = [line for line in lines if "resumed from step" in line]
    assert resumed, lines
    assert int(resumed[0].split()[-1]) >= 7, lines
    expected, got = _model(uninterrupted, tmp_path), _model(killed, tmp_path)
    assert expected.keys() == got.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-6, rtol=1e-5)


def test_a_transformers_gpt2_trains_in_tensor_parallel_pipeline_stages(
    mp_stack: Stack, tmp_path: Path
) -> None:
    steps = 16
    with mp_stack.client() as client:
        job = mp_stack.submit(
            client,
            "modelparallel-transformers",
            name="gpt2-tp-pp",
            entry_point="train_gpt2.py",
            instance_count=2,
            distribution=TRANSFORMERS_DISTRIBUTION,
            hyperparameters={"max_steps": steps},
            output_path=(tmp_path / "gpt2-tp-pp" / "output").as_uri(),
        )
        job = mp_stack.wait_until_ended(client, job["name"], timeout=300)
        lines = _lines(client, job["name"])
        assert job["status"] == "Completed", mp_stack.explain(job, list(client.logs(job["name"])))
    losses = _losses(lines)
    assert sorted(losses) == list(range(steps)), lines
    assert losses[steps - 1] < losses[0] / 2, losses
    assert any("4 blocks split (GPT-2)" in line for line in lines), lines
    assert any("pipeline stages begin at: transformer.h." in line for line in lines), lines
    # The saved model is transformers' own: a fresh GPT-2 of the config loads it strictly,
    # its tied embeddings one value.
    state = _model(job, tmp_path)
    assert torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=64, n_layer=4, n_head=4)
    transformers.GPT2LMHeadModel(config).load_state_dict(state, strict=True)
