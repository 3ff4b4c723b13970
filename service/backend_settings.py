"""Configuration of the cluster backends, nested in ``Settings``.

Each is read from one variable holding a JSON object (``RUNYARD_KUBERNETES='{...}'``) or
from one variable per field (``RUNYARD_KUBERNETES__NAMESPACE=jobs``). Only an operator sets
these; nothing here comes from a job spec.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Kubernetes object names: DNS-1123 labels (pods, services) and subdomains.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class KubernetesSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Where the client finds the cluster: in-cluster service account when both are unset.
    kubeconfig: str | None = None
    context: str | None = None
    # A plain API URL with no credentials (a local proxy, `kubectl proxy`, a mock server).
    api_url: str | None = None
    namespace: str = Field(default="runyard-jobs", pattern=DNS_LABEL, max_length=63)
    # The cluster's DNS domain: pods find each other as algo-N.<base>.<namespace>.svc.<it>.
    cluster_domain: str = Field(default="cluster.local", pattern=DNS_SUBDOMAIN, max_length=253)
    image: str = "runyard/runtime:0.1.0"
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(default_factory=list)
    # The job pods' own identity; it needs no Kubernetes permissions at all.
    service_account: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    priority_class: str | None = None
    # All-or-nothing start: every pod must be scheduled within this many seconds, or the
    # job fails naming the cause ("fail") or keeps waiting with a pending reason ("wait").
    # A scheduled pod still pulling its image is not waiting for capacity: not counted.
    schedule_timeout_seconds: float = Field(default=300.0, gt=0)
    on_unschedulable: Literal["fail", "wait"] = "fail"
    # Gang scheduling by an installed scheduler: a Volcano PodGroup, or a Kueue queue label.
    gang_scheduler: Literal["none", "volcano", "kueue"] = "none"
    gang_queue: str | None = None
    # A ReadWriteMany claim mounted at the artifact root's path in every pod, so file://
    # sources, channels and outputs are the same paths inside the job as on the server.
    artifact_volume_claim: str | None = None
    # The port each pod's runtime listens on for mpirun's launch agent.
    agent_port: int = Field(default=7077, ge=1024, le=65535)


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
