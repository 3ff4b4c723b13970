"""The EC2 backend's configuration, nested in the server's settings.

Read from one variable holding a JSON object (``RUNYARD_EC2='{...}'``) or from one variable
per field (``RUNYARD_EC2__IMAGE_ID=ami-...``). Only an operator sets these; nothing here
comes from a job spec.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Ec2Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    region: str = "us-east-1"
    # Another EC2-compatible endpoint (a test server, a private region).
    endpoint_url: str | None = None
    # The AMI, or a launch template (an ``lt-`` id or a name) that names one; at least one
    # of the two must be set before a job can run on EC2.
    image_id: str | None = None
    launch_template: str | None = None
    subnet_id: str | None = None
    security_group_ids: list[str] = Field(default_factory=list)
    # An instance profile name, or its ARN.
    iam_instance_profile: str | None = None
    key_name: str | None = None
    # How user-data installs the runtime on a fresh instance: pip arguments (no shell), such
    # as the URL of the runyard wheel built from this release. Runyard is not on PyPI, so
    # there is no default, and EC2 jobs are refused until it is set.
    runtime_package: str | None = Field(default=None, min_length=1)
    # The AMI's interpreter: the runtime's virtual environment is built on it and still sees
    # its packages, so a Deep Learning AMI's torch and CUDA libraries are used as they are.
    python: str = "python3"
    # The AMI's primary network interface, for NCCL/Gloo/MPI: ens5 on Nitro instances under
    # Amazon Linux 2023 and Ubuntu, eth0 under Amazon Linux 2.
    network_interface: str = Field(default="ens5", pattern=r"^[A-Za-z0-9_.:-]{1,15}$")
    # The AMI's root device, sized from the job's volume_size (/dev/sda1 on Ubuntu AMIs).
    root_device_name: str = "/dev/xvda"
    volume_type: Literal["gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"] = "gp3"
    # An NFS/EFS export mounted at the artifact root's path, as the Kubernetes volume is.
    artifact_nfs: str | None = None
    agent_port: int = Field(default=7077, ge=1024, le=65535)
    # How long an instance's user-data waits for the worker to publish its peers' addresses
    # (tags written once every instance of the job is launched) before giving up.
    address_wait_seconds: int = Field(default=600, gt=0)
    # How long an instance may stay pending before the job fails; None waits indefinitely.
    start_timeout_seconds: float | None = Field(default=600.0, gt=0)
    # Teardown waits this long for every instance to reach "terminated", polling DescribeInstances.
    teardown_timeout_seconds: float = Field(default=180.0, gt=0)
    poll_interval_seconds: float = Field(default=5.0, gt=0)
