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

    region: str = Field(default="us-east-1", description="The AWS region instances run in.")
    endpoint_url: str | None = Field(
        default=None,
        description="Another EC2-compatible endpoint (a test server, a private region).",
    )
    image_id: str | None = Field(
        default=None,
        description="The AMI instances boot: Python 3.11+, torch and, for `mpi` jobs, Open "
        "MPI, as a Deep Learning AMI has. This or `launch_template` must be set before a "
        "job can run on EC2.",
    )
    launch_template: str | None = Field(
        default=None,
        description="A launch template (its `lt-` id, or its name) that names the AMI and "
        "what else the instances start with.",
    )
    subnet_id: str | None = Field(default=None, description="The subnet instances run in.")
    security_group_ids: list[str] = Field(
        default_factory=list,
        description="The instances' security groups, as a JSON list: a job's instances "
        "must reach each other on every TCP port, and the API from them.",
    )
    iam_instance_profile: str | None = Field(
        default=None, description="The instances' instance profile: its name, or its ARN."
    )
    key_name: str | None = Field(
        default=None, description="The EC2 key pair to log in to the instances with."
    )
    runtime_package: str | None = Field(
        default=None,
        min_length=1,
        description="How user-data installs the runtime on a fresh instance: pip's "
        "arguments (split as a shell would, never run by one), such as the URL of the "
        "runyard wheel built from this release. Runyard is not on PyPI, so there is no "
        "default, and EC2 jobs are refused until it is set.",
    )
    python: str = Field(
        default="python3",
        description="The AMI's interpreter: the runtime's virtual environment is built on "
        "it and still sees its packages, so a Deep Learning AMI's torch and CUDA libraries "
        "are used as they are.",
    )
    network_interface: str = Field(
        default="ens5",
        pattern=r"^[A-Za-z0-9_.:-]{1,15}$",
        description="The AMI's primary network interface, for NCCL, Gloo and MPI: `ens5` on "
        "Nitro instances under Amazon Linux 2023 and Ubuntu, `eth0` under Amazon Linux 2.",
    )
    root_device_name: str = Field(
        default="/dev/xvda",
        description="The AMI's root device, sized from the job's `volume_size` "
        "(`/dev/sda1` on Ubuntu AMIs).",
    )
    volume_type: Literal["gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"] = Field(
        default="gp3", description="The root volume's EBS type."
    )
    artifact_nfs: str | None = Field(
        default=None,
        description="An NFS or EFS export that holds `RUNYARD_ARTIFACT_ROOT`, mounted at the "
        "root's path on every instance (and, by the operator, on the server), as the "
        "Kubernetes volume is: how instances read `file://` code and data and write "
        "models.",
    )
    agent_port: int = Field(
        default=7077,
        ge=1024,
        le=65535,
        description="The port each instance's runtime serves mpirun's launch agent on.",
    )
    address_wait_seconds: int = Field(
        default=600,
        gt=0,
        description="How long an instance's user-data waits for the worker to publish its "
        "peers' addresses (tags written once every instance of the job is launched) before "
        "giving up.",
    )
    start_timeout_seconds: float | None = Field(
        default=600.0,
        gt=0,
        description="How long an instance may stay pending before the job fails; `null` "
        "(in `RUNYARD_EC2`'s JSON object) waits indefinitely.",
    )
    teardown_timeout_seconds: float = Field(
        default=180.0,
        gt=0,
        description='How long a teardown waits for every instance to reach "terminated", '
        "polling DescribeInstances.",
    )
    poll_interval_seconds: float = Field(
        default=5.0, gt=0, description="Seconds between those DescribeInstances calls."
    )
