"""The EC2 calls that start one job, built from its launch request: pure data, no client.

One RunInstances call per host, each with its own client token (``<job id>-<host>``) so a
repeated call returns the instance already launched; tags carrying the job, host and
attempt, which is how the backend finds and adopts instances; and the user-data
(``userdata``) that installs the runtime, writes the instance's config files and runs
``train``. What a dry run shows is the same calls, secrets redacted and the user-data as
the script it compresses.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from contract import variables
from contract.hosts import RENDEZVOUS_PORT
from contract.images import Catalog
from contract.instance_config import Placement
from contract.layout import IMAGE_BASE_DIR
from contract.problems import Problem
from contract.spec import JobSpec
from provisioning.base import (
    REDACTED,
    LaunchError,
    LaunchRequest,
    file_uri_path,
    is_loopback,
    unshared_file_uris,
)
from provisioning.catalog import InstanceCatalog
from provisioning.ec2 import userdata
from provisioning.ec2.settings import Ec2Settings
from provisioning.instance_files import instance_files

JOB_ID_TAG = "runyard:job-id"
JOB_NAME_TAG = "runyard:job-name"
HOST_TAG = "runyard:host"
# Which start of the job launched the instance: a restart's instances are new ones, and
# the earlier attempt's, terminated, must not be taken for them.
ATTEMPT_TAG = "runyard:attempt"
# EC2 allows 50 tags per instance: the job's own five plus one address per host.
MAX_TAGS = 50
_BASE_TAGS = 5
# The agent mpirun reaches the other instances through, run by the runtime's interpreter.
LAUNCH_AGENT_MODULE = "runtime.launch.remote_agent"


class Ec2Error(LaunchError):
    """EC2 refused what a job needs; the message names the instance type and EC2's words."""


@dataclass(frozen=True)
class Ec2Instance:
    host: str
    # The keyword arguments of ``client.run_instances``, exactly as sent.
    run_instances: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ec2Plan:
    job_id: str
    job_name: str
    # The catalog's name (ml.p4d.24xlarge) and EC2's (p4d.24xlarge).
    instance_type: str
    ec2_type: str
    instances: list[Ec2Instance] = field(default_factory=list)
    attempt: int = 0


@dataclass(frozen=True)
class Planner:
    """What a job's EC2 calls depend on besides its request: the server's EC2 settings, its
    artifact root (shared with the instances through NFS, or not at all), its catalog,
    whose images' packages are installed beside the runtime on each instance, and its
    instance types (each ``ml.<EC2's type>``)."""

    settings: Ec2Settings
    artifact_root: str
    catalog: Catalog
    instance_catalog: InstanceCatalog = field(default_factory=InstanceCatalog)

    def plan(self, request: LaunchRequest) -> tuple[Ec2Plan, dict[str, Any]]:
        """The job's calls, and the same as a dry run shows them."""
        spec = request.spec
        for problem in self.problems(spec, request.service_url):
            raise Ec2Error(problem.message)
        ec2_type = spec.instance_type.removeprefix("ml.")
        instances: list[Ec2Instance] = []
        public: list[dict[str, Any]] = []
        for host in request.hosts:
            secrets = (request.tokens[host], request.agent_key)
            args = self._run_instances_args(request, host, ec2_type, secrets)
            shown = self._run_instances_args(request, host, ec2_type, (REDACTED, REDACTED))
            shown["UserData"] = self._script(request, host, (REDACTED, REDACTED))
            instances.append(Ec2Instance(host, args))
            public.append({"host": host, "run_instances": shown})
        plan = Ec2Plan(
            request.job.id,
            request.job.name,
            spec.instance_type,
            ec2_type,
            instances,
            request.job.attempt,
        )
        summary = {
            "job_id": plan.job_id,
            "job_name": plan.job_name,
            "region": self.settings.region,
            "instances": public,
        }
        return plan, summary

    def problems(self, spec: JobSpec, service_url: str) -> Iterator[Problem]:
        """What keeps a job from running on this server's EC2 setup, with the field to blame
        (``backend`` where it is the server's configuration)."""
        if spec.instance_type not in self.instance_catalog.cluster_types():
            yield Problem(
                ("instance_type",),
                f"instance type {spec.instance_type!r} is not an ml.* type of the catalog",
            )
        if not self.settings.image_id and not self.settings.launch_template:
            yield Problem(
                ("backend",),
                "set RUNYARD_EC2__IMAGE_ID or RUNYARD_EC2__LAUNCH_TEMPLATE to run on EC2",
            )
        if spec.image.container is not None:
            yield Problem(
                ("image_uri",),
                f"{spec.image.container[:120]!r} is a container image, which EC2 instances do "
                "not run; name an image of the catalog, or run it on the kubernetes backend",
            )
        if not self.settings.runtime_package:
            yield Problem(
                ("backend",),
                "set RUNYARD_EC2__RUNTIME_PACKAGE to what pip installs the runtime from on "
                "the instances (the URL of this release's runyard wheel, say) to run on EC2",
            )
        if self.settings.artifact_nfs and not self.artifact_root.startswith("file://"):
            yield Problem(
                ("backend",),
                "RUNYARD_EC2__ARTIFACT_NFS needs a file:// RUNYARD_ARTIFACT_ROOT",
            )
        if _BASE_TAGS + spec.instance_count > MAX_TAGS:
            most = MAX_TAGS - _BASE_TAGS
            yield Problem(("instance_count",), f"at most {most} EC2 instances per job")
        if is_loopback(service_url):
            yield Problem(
                ("backend",),
                f"EC2 instances cannot report to {service_url}: "
                "set RUNYARD_PUBLIC_URL to an address they can reach",
            )
        shared = self.artifact_root if self.settings.artifact_nfs else None
        unreadable = unshared_file_uris(spec, shared)
        if unreadable:
            names = ", ".join(".".join(str(part) for part in loc) for loc in unreadable)
            yield Problem(
                unreadable[0],
                f"EC2 instances cannot read the file:// URIs of {names}: use "
                "s3://, or share RUNYARD_ARTIFACT_ROOT with RUNYARD_EC2__ARTIFACT_NFS",
            )

    def _run_instances_args(
        self, request: LaunchRequest, host: str, ec2_type: str, secrets: tuple[str, str]
    ) -> dict[str, Any]:
        settings = self.settings
        user_data = userdata.compress(self._script(request, host, secrets))
        if len(user_data) > userdata.USER_DATA_LIMIT:
            raise Ec2Error(
                f"the user-data of {host} is {len(user_data)} bytes compressed, over EC2's "
                f"{userdata.USER_DATA_LIMIT}: fewer or shorter hyperparameters or environment"
            )
        args: dict[str, Any] = {
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": client_token(request.job.id, host, request.job.attempt),
            "InstanceType": ec2_type,
        }
        if settings.image_id:
            args["ImageId"] = settings.image_id
        if settings.launch_template:
            key = (
                "LaunchTemplateId"
                if settings.launch_template.startswith("lt-")
                else "LaunchTemplateName"
            )
            args["LaunchTemplate"] = {key: settings.launch_template}
        if settings.subnet_id:
            args["SubnetId"] = settings.subnet_id
        if settings.security_group_ids:
            args["SecurityGroupIds"] = list(settings.security_group_ids)
        if settings.iam_instance_profile:
            key = "Arn" if settings.iam_instance_profile.startswith("arn:") else "Name"
            args["IamInstanceProfile"] = {key: settings.iam_instance_profile}
        if settings.key_name:
            args["KeyName"] = settings.key_name
        args["UserData"] = user_data
        args["InstanceInitiatedShutdownBehavior"] = "terminate"
        # IMDSv2 only, with the instance's tags readable there: how user-data learns its peers.
        args["MetadataOptions"] = {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "InstanceMetadataTags": "enabled",
        }
        args["BlockDeviceMappings"] = [
            {
                "DeviceName": settings.root_device_name,
                "Ebs": {
                    "VolumeSize": request.spec.volume_size,
                    "VolumeType": settings.volume_type,
                    "DeleteOnTermination": True,
                },
            }
        ]
        tags = [
            {"Key": "Name", "Value": f"{request.job.name}-{host}"},
            {"Key": JOB_NAME_TAG, "Value": request.job.name},
            {"Key": JOB_ID_TAG, "Value": request.job.id},
            {"Key": HOST_TAG, "Value": host},
            {"Key": ATTEMPT_TAG, "Value": str(request.job.attempt)},
        ]
        args["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": [dict(tag) for tag in tags]},
        ]
        if request.spec.use_spot_instances:
            args["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
        return args

    def _script(self, request: LaunchRequest, host: str, secrets: tuple[str, str]) -> str:
        """The instance's boot script; ``secrets``: its token and the job's agent key."""
        token, agent_key = secrets
        settings = self.settings
        python = f"{userdata.Layout().venv}/bin/python3"
        placement = Placement(
            master_addr=request.hosts[0],
            master_port=RENDEZVOUS_PORT,
            launch_agent=(python, "-m", LAUNCH_AGENT_MODULE),
            agent_port=settings.agent_port,
            # On spot, the runtime watches for EC2's two-minute interruption warning.
            spot_notice="ec2" if request.spec.use_spot_instances else None,
        )
        files = instance_files(
            request,
            host,
            placement,
            # Names, not addresses: user-data makes them resolve (see userdata).
            host_addresses={name: name for name in request.hosts},
            network_interface=settings.network_interface,
        )
        env = variables.instance_environment(
            base_dir=IMAGE_BASE_DIR,
            service_url=request.service_url,
            job_name=request.job.name,
            job_id=request.job.id,
            host=host,
            token=token,
            agent_key=agent_key,
        )
        boot = userdata.Bootstrap(
            job_name=request.job.name,
            host=host,
            hosts=request.hosts,
            python=settings.python,
            # Set: problems() refuses a plan without it before any script is written. A
            # catalog image's packages come with it: the instance's environment is the image.
            pip_args=[*shlex.split(settings.runtime_package or ""), *self._image_packages(request)],
            files=files,
            env=env,
            address_wait_seconds=settings.address_wait_seconds,
            nfs_export=settings.artifact_nfs,
            nfs_path=file_uri_path(self.artifact_root) if settings.artifact_nfs else None,
        )
        return userdata.render(boot)

    def _image_packages(self, request: LaunchRequest) -> list[str]:
        image = self.catalog.get(request.spec.image.image)
        return list(image.packages) if image is not None else []


def client_token(job_id: str, host: str, attempt: int = 0) -> str:
    """RunInstances' idempotency token: one per job, attempt and host, at most 64
    characters. EC2 answers a repeated token with the instance it launched for it, even
    terminated, so a restart needs tokens of its own."""
    token = f"{job_id}-{host}" if attempt == 0 else f"{job_id}-{attempt}-{host}"
    return token[-64:]
