"""runyard.json is made of three typed parts: the job's description, the backend's
placement of the instance and its sandbox."""

from __future__ import annotations

import dataclasses
import json

from contract.instance_config import (
    NO_SANDBOX,
    JobDescription,
    Placement,
    RunyardConfig,
    Sandbox,
)
from contract.spec import JobSpec


def test_runyard_json_is_made_of_the_jobs_description_its_placement_and_its_sandbox() -> None:
    spec = JobSpec(entry_point="t.py", source_uri="s", instance_type="local", output_path="o")
    job = JobDescription(job_name="job-1", job_id="0" * 32, spec=spec)
    placement = Placement(master_addr="algo-1", master_port=7777, agent_port=7077)
    config = RunyardConfig.of(job, placement, Sandbox(ssh=True))
    parts = (JobDescription, Placement, Sandbox)
    names = [item.name for part in parts for item in dataclasses.fields(part)]
    # Each field once, in one of the three parts: none is the config's own.
    assert [item.name for item in dataclasses.fields(RunyardConfig)] == names
    assert (config.job_name, config.agent_port, config.ssh) == ("job-1", 7077, True)
    assert RunyardConfig.from_json(json.loads(config.to_json())) == config
    # A backend that gives machines of their own leaves the sandbox at "none".
    alone = RunyardConfig.of(job, placement)
    assert all(getattr(alone, item.name) == item.default for item in dataclasses.fields(NO_SANDBOX))
