"""Hyperparameters that each pass their limits but together cannot reach the script: the
runtime puts them all into single environment variables, and Linux refuses to start a
program with a variable over MAX_ARG_STRLEN. The API refuses them when the job is
submitted; the most it accepts still start a real process with the environment the
runtime builds."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract import instance_config as files
from contract.hosts import host_names
from contract.hyperparameters import to_cli_args
from contract.layout import CONFIG_DIR
from contract.limits import MAX_ARG_STRLEN, MAX_HYPERPARAMETER_BYTES, hyperparameter_bytes
from contract.spec import Channel, JobSpec
from runtime.instance.environment import script_environment
from service.jobs.schemas import hyperparameters_too_large
from tests.conftest import job_spec

# What the issue saw: 53 values of 2,490 characters, each within SageMaker's limits.
TOO_MANY = {f"hp{i:02d}": "v" * 2490 for i in range(53)}

# Sees every hyperparameter, as SM_HPS and as its arguments.
_SCRIPT = """
import json, os, sys
hps = json.loads(os.environ["SM_HPS"])
assert json.loads(os.environ["SM_TRAINING_ENV"])["hyperparameters"] == hps
assert len(sys.argv) - 1 == 2 * len(hps)
"""


def _most_that_fit() -> dict[str, Any]:
    """Hyperparameters that take exactly MAX_HYPERPARAMETER_BYTES, the last one topped up."""
    values: dict[str, Any] = {}
    while MAX_HYPERPARAMETER_BYTES - hyperparameter_bytes(values) > 2490:
        values[f"hp{len(values):03d}"] = "v" * 2400
    last = f"hp{len(values):03d}"
    shortest, longest = 0, 2490
    while shortest < longest:  # the longest last value that still fits
        middle = (shortest + longest + 1) // 2
        if hyperparameter_bytes({**values, last: "v" * middle}) <= MAX_HYPERPARAMETER_BYTES:
            shortest = middle
        else:
            longest = middle - 1
    return {**values, last: "v" * shortest}


def _start_script(base: Path, hyperparameters: dict[str, Any]) -> None:
    """Write an instance's config as a backend does for a large job (16 hosts, 20 channels
    of the longest names, long paths), and start a script with the environment and
    arguments the runtime builds from it."""
    hosts = host_names(16)
    addresses = {host: f"127.0.1.{number}" for number, host in enumerate(hosts, start=1)}
    inputs = {f"{i:02d}" + "c" * 62: Channel(uri="file:///" + "d" * 1000) for i in range(20)}
    config = base / CONFIG_DIR
    config.mkdir(parents=True)
    runyard = files.RunyardConfig(
        job_name="j" * 63,
        job_id="0" * 32,
        spec=JobSpec(
            entry_point="e" * 253 + ".py",
            source_uri="file:///" + "s" * 1016,
            instance_type="ml.m5.xlarge",
            output_path="file:///" + "o" * 1016,
            inputs=inputs,
        ),
        master_addr=addresses[hosts[0]],
        master_port=29500,
    )
    written = {
        "hyperparameters.json": files.hyperparameters_file(hyperparameters),
        "resourceconfig.json": files.resource_config(
            hosts[-1], hosts, "ml.m5.xlarge", network_interface="eth0", host_addresses=addresses
        ),
        "inputdataconfig.json": files.input_data_config(inputs),
    }
    for name, content in written.items():
        (config / name).write_text(files.dump(content))
    (config / "runyard.json").write_text(runyard.to_json())
    instance = files.load(base)
    env = script_environment(instance, os.environ, num_gpus=0, num_cpus=1)
    argv = [sys.executable, "-c", _SCRIPT, *to_cli_args(instance.hyperparameters)]
    subprocess.run(argv, env=env, check=True, timeout=60)


def test_hyperparameters_no_environment_can_carry_are_refused(
    api: TestClient, source_dir: Path
) -> None:
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, hyperparameters=TOO_MANY))

    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "hyperparameters"]
    assert f"over the {MAX_HYPERPARAMETER_BYTES} that fit" in error["msg"]
    assert str(MAX_ARG_STRLEN) in error["msg"]
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_the_limit_is_where_a_script_can_no_longer_start(tmp_path: Path) -> None:
    most = _most_that_fit()
    assert hyperparameter_bytes(most) == MAX_HYPERPARAMETER_BYTES
    assert hyperparameters_too_large(most) is None
    assert hyperparameters_too_large({**most, "one-more": 1}) is not None
    assert hyperparameters_too_large(TOO_MANY) is not None

    base = tmp_path / ("deep" * 30) / "jobs" / ("j" * 63) / "algo-16"
    _start_script(base / "accepted", most)
    # Without the limit, the runtime's start fails as the job did.
    with pytest.raises(OSError, match="Argument list too long") as refused:
        _start_script(base / "refused", TOO_MANY)
    assert refused.value.errno == errno.E2BIG
