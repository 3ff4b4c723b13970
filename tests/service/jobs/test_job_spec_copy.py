"""The job's stored record reaches its instances as one description: ``JobSpec`` is the
record's instance-facing part, copied field by field under the same names, and each
instance gets it whole in ``runyard.json``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from contract import json_records
from contract.instance_config import RunyardConfig, load
from contract.spec import JobSpec
from service.jobs.record import JobFields, JobRecord
from tests.instances import launch_request, write_instances


def _record(**changes: object) -> JobRecord:
    values: dict[str, object] = {
        "name": "job-1",
        "entry_point": "train.py",
        "source_uri": "s3://code/src.tar.gz",
        "instance_type": "ml.m5.xlarge",
        "instance_count": 2,
        "volume_size": 100,
        "framework": "tensorflow",
        "image_uri": "tensorflow-2.20",
        "output_path": "s3://out",
        "hyperparameters": {"epochs": 3, "lr": "0.1"},
        "distribution": {"mpi": {"enabled": True, "processes_per_host": 2}},
        "inputs": {"train": {"uri": "s3://data/train", "input_mode": "FastFile"}},
        "environment": {"A": "1"},
        "checkpoint_s3_uri": "s3://ckpt/job-1",
        "checkpoint_local_path": "/opt/ml/checkpoints",
        "tensorboard_s3_output_path": "s3://tb/runs",
        "tensorboard_local_path": "/opt/ml/output/tb",
        "use_spot_instances": True,
        "max_wait": 90000,
        "enable_network_isolation": True,
        "output_compression": "NONE",
        "image": {"name": "pytorch-2.13", "note": "py3.11"},
    }
    values.update(changes)
    return JobRecord.load(values)


def test_every_field_of_the_instances_description_is_the_records_of_that_name() -> None:
    record_fields = set(JobFields.model_fields)
    assert {item.name for item in dataclasses.fields(JobSpec)} <= record_fields


def test_the_copy_has_the_records_values_in_the_contracts_types() -> None:
    record = _record()
    spec = record.job_spec()
    # Every field differs from its default here (but those the record fills in for a
    # container job, below): a field added since is in this test's record too, so the
    # round trip below checks its type.
    defaults = JobSpec(entry_point="", source_uri="", instance_type="", output_path="")
    same = [
        item.name
        for item in dataclasses.fields(JobSpec)
        if getattr(spec, item.name) == getattr(defaults, item.name)
    ]
    assert same == ["container_entrypoint", "container_arguments"]
    # Read back from JSON by the spec's own annotations: a value of the wrong type (a
    # pydantic model, a list for a tuple) would not come back equal.
    assert json_records.read(JobSpec, json.loads(json.dumps(json_records.to_data(spec)))) == spec
    assert (spec.instance_count, spec.output_compression, spec.use_spot_instances) == (
        2,
        "NONE",
        True,
    )
    assert spec.inputs["train"].input_mode == "FastFile"
    assert spec.channel_uris == {"train": "s3://data/train"}
    assert (spec.image.image, spec.image.note) == ("pytorch-2.13", "py3.11")
    assert spec.hyperparameters == {"epochs": 3, "lr": "0.1"}
    # A copy: the record's own dicts are not handed on to be changed.
    assert spec.hyperparameters is not record.hyperparameters
    assert record.job_spec_at("s3://elsewhere").output_path == "s3://elsewhere"
    container = _record(entry_point=None, container_entrypoint=["bash"], container_arguments=["x"])
    assert container.job_spec().entry_point == ""
    assert container.job_spec().container_command == ("bash", "x")


def test_an_instance_reads_the_jobs_description_as_the_server_wrote_it(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('x')\n")
    request = launch_request(
        source,
        instance_count=2,
        hyperparameters={"epochs": 3},
        environment={"A": "1"},
        checkpoint_local_path="/opt/ml/checkpoints/mine",
        inputs={"train": {"uri": (tmp_path / "data").as_uri()}},
    )
    base = write_instances(tmp_path / "job", request)["algo-2"]
    config = load(base)
    assert config.spec == request.spec
    runyard = json.loads((base / "input" / "config" / "runyard.json").read_text())
    # Its hyperparameters are written once, in SageMaker's file, and read back from there.
    written = RunyardConfig.from_json(runyard).spec
    assert written == dataclasses.replace(request.spec, hyperparameters={})
    # The description's checkpoint path is this instance's, under its base directory.
    assert config.paths.checkpoints == base / "checkpoints" / "mine"
