"""The contract's records agree with the parts that use them: every mode's options have a
place in the API's schema and a launcher in the runtime, runyard.json reads back what was
written, and a job's stage follows from its columns alone."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contract import agent_hosts, modes, sagemaker_flags
from contract.agent_hosts import AgentHost, AgentHostsError
from contract.images import Choice
from contract.instance_config import ConfigError, RunyardConfig
from contract.spec import Channel, JobSpec
from provisioning.base import JobRef
from runtime.launch import LAUNCHERS
from service.jobs.record import JobRecord
from service.jobs.schemas import JobCreate
from service.jobs.spec_parts import Distribution
from service.jobs.states import Stage, Status
from worker.reconciler.snapshot import JobSnapshot

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_every_launcher_a_mode_names_is_in_the_runtime() -> None:
    named = {mode.launcher for mode in modes.MODES if mode.launcher is not None}
    assert named | {modes.Launcher.SCRIPT} == set(LAUNCHERS) == set(modes.Launcher)


@pytest.mark.parametrize("mode", modes.MODES, ids=lambda mode: mode.name)
def test_every_mode_has_its_options_in_the_api_schema(mode: modes.Mode) -> None:
    *parents, last = mode.name.split(".")
    distribution: dict[str, object] = {last: {"enabled": True}}
    for parent in reversed(parents):
        distribution = {parent: distribution}
    parsed = Distribution.model_validate(distribution)
    assert parsed.enabled_modes() == [mode.name]
    assert modes.enabled_mode(parsed.as_dict()) == mode


# A value of each option a mode's SageMaker flags carry.
OPTION_VALUES = {
    "processes_per_host": 2,
    "custom_mpi_options": "-x A=1",
    "parameters": {"ddp": True},
}


def _enabling(*names: str) -> dict[str, Any]:
    """A distribution that enables the modes ``names``, each with every option its
    SageMaker flags carry."""
    distribution: dict[str, Any] = {}
    for name in names:
        mode = modes.by_name(name)
        carried = mode.sagemaker_flags.options if mode.sagemaker_flags else {}
        *parents, last = mode.path
        section = distribution
        for parent in parents:
            section = section.setdefault(parent, {})
        section[last] = {"enabled": True, **{key: OPTION_VALUES[key] for key in carried}}
    return distribution


@pytest.mark.parametrize("mode", modes.MODES, ids=lambda mode: mode.name)
def test_every_mode_reads_back_from_the_sagemaker_flags_its_record_names(mode: modes.Mode) -> None:
    named = mode.sagemaker_flags
    assert named is not None
    assert set(named.options) <= set(mode.takes.keys if mode.takes else {})
    # A mode the SDK names without a flag of its own is named beside the one it runs under.
    assert named.enabled is not None or mode.runs_under is not None
    distribution = _enabling(*filter(None, [mode.runs_under, mode.name]))
    hyperparameters = sagemaker_flags.flags(distribution)
    assert set(hyperparameters) >= {*filter(None, [named.enabled]), *named.options.values()}
    assert sagemaker_flags.distribution(hyperparameters) == (distribution, [])


def test_a_mode_without_the_mode_it_runs_under_is_a_problem_naming_that() -> None:
    distribution = {"smdistributed": {"modelparallel": {"enabled": True}}}
    [problem] = modes.problems(distribution, "pytorch", instance_count=1, gpus=0)
    assert problem.loc == ("distribution", "mpi")
    assert "enable mpi too" in problem.message
    [framework, *_] = modes.problems(distribution, "tensorflow", instance_count=1, gpus=0)
    assert "runs pytorch scripts" in framework.message


def test_model_parallel_runs_under_mpi_with_its_launch_options() -> None:
    distribution = {
        "mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": "-x A=1"},
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": {"ddp": True}}},
    }
    mode = modes.enabled_mode(distribution)
    assert mode is not None
    assert mode.name == "smdistributed.modelparallel"
    assert mode.libraries
    assert modes.too_many(distribution) == []
    options = mode.launch_options(distribution)
    assert options["processes_per_host"] == 2
    assert options["custom_mpi_options"] == "-x A=1"
    assert modes.problems(distribution, "pytorch", instance_count=2, gpus=0) == []
    # Degrees are weighed against every process the job starts: 2 instances x 2.
    sharded = {**distribution["smdistributed"]["modelparallel"]}
    sharded["parameters"] = {"ddp": True, "sharded_data_parallel_degree": 4}
    distribution["smdistributed"] = {"modelparallel": sharded}
    assert modes.problems(distribution, "pytorch", instance_count=2, gpus=0) == []
    assert modes.problems(distribution, "pytorch", instance_count=1, gpus=0)


def test_runyard_json_reads_back_what_was_written() -> None:
    written = RunyardConfig(
        job_name="job-1",
        job_id="0" * 32,
        spec=JobSpec(
            entry_point="train.py",
            source_uri="file:///src",
            instance_type="ml.m5.xlarge",
            output_path="file:///out",
            distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
            inputs={"train": Channel("file:///data", input_mode="FastFile")},
            environment={"A": "1"},
            checkpoint_s3_uri="s3://b/ckpt",
            checkpoint_local_path="/opt/ml/checkpoints",
            container_entrypoint=("bash",),
            image=Choice("pytorch-2.13", note="py3.11"),
        ),
        master_addr="10.0.0.1",
        master_port=29500,
        launch_agent=("python3", "-m", "runtime.launch.remote_agent"),
        agent_port=7077,
        attempt=2,
        first_log_seq=41,
        spot_notice="ec2",
        instance_metrics_seconds=2.5,
    )
    data = json.loads(written.to_json())
    assert list(data) == [item.name for item in dataclasses.fields(RunyardConfig)]
    assert RunyardConfig.from_json(data) == written
    with pytest.raises(ConfigError, match="'master_port'"):
        RunyardConfig.from_json({key: value for key, value in data.items() if key != "master_port"})
    with pytest.raises(ConfigError, match="instance_metrics_seconds must be a number of seconds"):
        RunyardConfig.from_json({**data, "instance_metrics_seconds": -1})
    with pytest.raises(ConfigError, match="agent_port must be a TCP port"):
        RunyardConfig.from_json({**data, "agent_port": 70000})
    # The job's own description is read as strictly, each value named by its path.
    inputs = {"train": {**data["spec"]["inputs"]["train"], "uri": 7}}
    with pytest.raises(ConfigError, match=r"spec\.inputs\.train\.uri must be a string"):
        RunyardConfig.from_json({**data, "spec": {**data["spec"], "inputs": inputs}})
    with pytest.raises(ConfigError, match="'spec'"):
        RunyardConfig.from_json({key: value for key, value in data.items() if key != "spec"})


def _snapshot(**columns: object) -> JobSnapshot:
    values: dict[str, object] = {
        "ref": JobRef("0" * 32, "job-1"),
        "version": 1,
        "project": "default",
        "stage": Stage.QUEUED,
        "status": Status.IN_PROGRESS,
        "secondary_status": "Starting",
        "spec": JobRecord(
            name="job-1",
            output_path="file:///out",
            entry_point="train.py",
            source_uri="file:///src",
            instance_type="local",
        ),
        "backend": "local",
        "launched_at": None,
        "stop_reason": None,
        "stop_signalled_at": None,
        "created_at": NOW,
        "admitted_at": None,
        "restarts": 0,
        "infrastructure_restarts": 0,
        "interruptions": 0,
        "attempt_first_log_seq": 1,
        "pending_reason": None,
        "restart_cause": None,
        "interruption_noticed_at": None,
        "interruption_message": None,
        "worked_seconds": 0.0,
        "launched_image": None,
        "launched_image_note": None,
    }
    values.update(columns)
    return JobSnapshot(**values)  # type: ignore[arg-type]


def test_the_agents_hosts_file_reads_back_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    written = {
        "algo-1": AgentHost(base="/jobs/j/algo-1", cwd="/jobs/j/algo-1/code", cpus=[0, 1]),
        "algo-2": AgentHost(base="/jobs/j/algo-2", cwd="/jobs/j/algo-2/code", env={"A": "1"}),
    }
    agent_hosts.write(path, written)
    assert agent_hosts.read(path) == written
    assert set(json.loads(path.read_text())["algo-1"]) == {"base", "cwd", "env", "cpus"}


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"cwd": "/c"}, "algo-2.base"),
        ({"base": "/b", "cwd": "/c", "env": {"A": 1}}, "algo-2.env.A"),
        ({"base": "/b", "cwd": "/c", "cpus": [True]}, "algo-2.cpus[0]"),
        ({"base": "/b", "cwd": "/c", "cpus": [-1]}, "algo-2.cpus[0]"),
        ("/b", "algo-2"),
        ({"base": "/b", "cwd": "/c", "gpus": [0]}, "algo-2.gpus"),
    ],
)
def test_a_malformed_hosts_entry_is_refused_naming_its_key(
    tmp_path: Path, entry: object, key: str
) -> None:
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"algo-1": {"base": "/b", "cwd": "/c"}, "algo-2": entry}))
    with pytest.raises(AgentHostsError, match=f"^{re.escape(key)}: "):
        agent_hosts.read(path)


def test_an_unprepared_spec_has_no_job_spec(tmp_path: Path) -> None:
    spec = JobCreate(entry_point="train.py", source_uri=tmp_path.as_uri(), instance_type="local")
    # A request becomes a record only with what the server chooses: a name, an output path.
    with pytest.raises(ValidationError) as caught:
        JobRecord.model_validate(spec.model_dump(exclude={"base_job_name"}, exclude_none=True))
    assert {error["loc"] for error in caught.value.errors()} == {("name",), ("output_path",)}
    prepared = spec.job_spec_at("file:///out")
    assert (prepared.output_path, prepared.hosts) == ("file:///out", ["algo-1"])


def test_pipeline_stages_run_where_their_degrees_divide_the_ranks() -> None:
    def distribution(partitions: int) -> dict[str, object]:
        parameters = {"partitions": partitions, "microbatches": 4, "ddp": True}
        return {
            "mpi": {"enabled": True, "processes_per_host": 2},
            "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
        }

    assert modes.problems(distribution(2), "pytorch", instance_count=2, gpus=0) == []
    [problem] = modes.problems(distribution(3), "pytorch", instance_count=2, gpus=0)
    assert problem.loc[-1] == "partitions"
    assert "3 does not divide the job's 4 processes" in problem.message
