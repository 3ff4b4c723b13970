"""Where a job reads and writes, worked out once a job name and kept with the spec."""

from __future__ import annotations

import dataclasses
import json

from contract.instance_config import JobDescription, Placement, RunyardConfig
from contract.spec import JobSpec, StorageUse


def _spec(**fields: str) -> JobSpec:
    given = {
        "entry_point": "train.py",
        "source_uri": "s3://code/src.tar.gz",
        "instance_type": "local",
        "output_path": "s3://out/models",
        **fields,
    }
    return JobSpec(**given)  # type: ignore[arg-type]


def test_each_uri_is_read_as_given_or_written_below_it() -> None:
    uses = _spec(checkpoint_s3_uri="s3://out/ckpt").storage_uses("job-1")
    assert uses == (
        StorageUse(("output_path",), "s3://out/models", "s3://out/models/job-1", writing=True),
        StorageUse(("source_uri",), "s3://code/src.tar.gz", "s3://code/src.tar.gz", writing=False),
        StorageUse(("checkpoint_s3_uri",), "s3://out/ckpt", "s3://out/ckpt", writing=True),
    )


def test_the_uses_are_kept_per_job_name_and_not_by_a_copy_with_other_fields() -> None:
    spec = _spec()
    first = spec.storage_uses("job-1")
    assert spec.storage_uses("job-1") is first
    assert spec.storage_uses("job-2")[0].used == "s3://out/models/job-2"
    moved = dataclasses.replace(spec, output_path="s3://elsewhere")
    assert moved.storage_uses("job-1")[0].used == "s3://elsewhere/job-1"
    # What is kept is no field: the spec compares, and travels to the instances, as before.
    assert moved == dataclasses.replace(_spec(), output_path="s3://elsewhere")
    placement = Placement(master_addr="algo-1", master_port=7777, agent_port=7077)
    config = RunyardConfig.of(JobDescription(job_name="j", job_id="0" * 32, spec=spec), placement)
    assert "_uses_of" not in config.to_json()
    assert RunyardConfig.from_json(json.loads(config.to_json())).spec == spec
