"""An instance's processes started as the job's user, confined (``runtime.linux.confine``),
where the instance runs the job apart from its agent."""

from __future__ import annotations

import dataclasses

from contract.instance_config import InstanceConfig
from runtime.instance.job_user import job_environment
from runtime.launch.workers import Launch
from runtime.linux.confine import Confinement


def confined(launch: Launch, how: Confinement, config: InstanceConfig) -> Launch:
    """``launch`` with each of its processes started confined, in the job's user's
    environment."""
    specs = []
    for spec in launch.specs:
        argv, env = how.start(spec.argv, job_environment(spec.env, config))
        specs.append(dataclasses.replace(spec, argv=argv, env=env))
    return dataclasses.replace(launch, specs=specs)
