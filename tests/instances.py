"""Lay out an instance's base directory exactly as a backend would, for runtime tests."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from contract.hosts import host_names
from contract.images import Image, StoredImage
from contract.instance_config import Placement
from provisioning.base import (
    InstanceState,
    InstanceStatus,
    JobRef,
    LaunchError,
    LaunchRequest,
    Materialized,
)
from provisioning.instance_files import instance_files
from provisioning.local.backend import LocalBackend, LocalPlan, free_port
from provisioning.local.images import ImageStore
from provisioning.local.stand_ins import ImageDecision
from service.jobs.schemas import JobCreate

# The jobs these tests launch, one id per test process: the local backend adopts a live
# process that carries its job's id and host as an instance an earlier attempt started,
# so two test processes running at once (pytest-xdist) must not share one.
JOB_ID = uuid.uuid4().hex


def launch_request(source: Path, **spec: Any) -> LaunchRequest:
    values: dict[str, Any] = {
        "name": "job-1",
        "entry_point": "train.py",
        "source_uri": source.as_uri(),
        "instance_type": "local",
        "output_path": (source.parent / "artifacts").as_uri(),
    }
    values.update(spec)
    return LaunchRequest(
        job=JobRef(id=JOB_ID, name=values["name"]),
        spec=JobCreate.model_validate(values).job_spec_at(values["output_path"]),
        service_url="http://127.0.0.1:1",
        tokens=dict.fromkeys(host_names(int(values.get("instance_count", 1))), "unused"),
    )


def write_instances(
    root: Path, request: LaunchRequest, master_port: int | None = None
) -> dict[str, Path]:
    """Config files for every host under ``root/<host>``; returns each host's base dir."""
    return _write(
        root,
        request,
        addresses=dict.fromkeys(request.hosts, "127.0.0.1"),
        master_port=master_port or free_port(),
        launch_agent=[],
        agent_port=None,
    )


def write_networked_instances(
    root: Path,
    request: LaunchRequest,
    *,
    addresses: dict[str, str],
    agent_port: int,
    launch_agent: list[str],
) -> dict[str, Path]:
    """As a cluster backend lays instances out: each host at its own address, reached by
    mpirun through the runtime's own launch agent on ``agent_port``."""
    return _write(
        root,
        request,
        addresses=addresses,
        master_port=free_port(),
        launch_agent=launch_agent,
        agent_port=agent_port,
    )


def _write(
    root: Path,
    request: LaunchRequest,
    *,
    addresses: dict[str, str],
    master_port: int,
    launch_agent: list[str],
    agent_port: int | None,
) -> dict[str, Path]:
    bases = {}
    for host in request.hosts:
        base = root / host
        placement = Placement(
            # These instances share this machine, whose /etc/hosts names no algo-N.
            master_addr=addresses[request.hosts[0]],
            master_port=master_port,
            launch_agent=tuple(launch_agent),
            agent_port=agent_port,
        )
        for relative, content in instance_files(
            request, host, placement, host_addresses=addresses, network_interface="lo"
        ).items():
            (base / relative).parent.mkdir(parents=True, exist_ok=True)
            (base / relative).write_text(content)
        bases[host] = base
    return bases


def start_runtime(base: Path, **extra_env: str) -> subprocess.Popen[str]:
    """The instance entry point as a real process, with no service to report to."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env.update({"SM_BASE_DIR": str(base), "PYTHONUNBUFFERED": "1", **extra_env})
    return subprocess.Popen(
        [sys.executable, "-m", "runtime.train"],
        env=env,
        cwd=base,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


class _Unbuilt(ImageStore):
    """Sleepers run no image: none is built for them (a job that names a framework's
    image would otherwise start a build in the background, to no end)."""

    def ensure(self, image: Image) -> StoredImage:
        return self.stored(image)


class SleepingInstances(LocalBackend):
    """Real local instances whose processes only sleep: the test plays their runtimes'
    part and reports for them. ``launches`` lists the attempt of every launch, ``ran_on``
    the image each ran on."""

    def __init__(self, jobs_dir: Path, teardown_grace: float = 0.5) -> None:
        # Sleepers need no namespaces: the test plays their runtimes' part.
        super().__init__(
            jobs_dir,
            teardown_grace=teardown_grace,
            isolation="shared",
            images=_Unbuilt(jobs_dir.parent / "images"),
        )
        self.launches: list[int] = []
        # The image every launch ran its instances on.
        self.ran_on: list[str] = []
        # Set, every instance reads as pending for this reason (a cluster with no room).
        self.pending_reason: str | None = None
        # Set, what every instance printed (in place of its real console).
        self.console_text: str | None = None
        # How many launches to come the provider refuses for want of capacity.
        self.out_of_capacity = 0

    def launch_plan(
        self,
        request: LaunchRequest,
        image: ImageDecision | None = None,
        choosing: contextlib.ExitStack | None = None,
    ) -> Materialized[LocalPlan]:
        if self.out_of_capacity:
            # Refused before anything of the job is made, as RunInstances refuses.
            self.out_of_capacity -= 1
            raise LaunchError("InsufficientInstanceCapacity: none left", capacity=True)
        materialized = super().launch_plan(request, image, choosing)
        for instance in materialized.plan.instances:
            instance.argv[:] = [sys.executable, "-c", "import time; time.sleep(120)"]
        return materialized

    def start(self, materialized: Materialized[LocalPlan]) -> None:
        config = materialized.plan.instances[0].files["input/config/runyard.json"]
        self.launches.append(json.loads(config)["attempt"])
        self.ran_on.append(json.loads(config)["image"])
        super().start(materialized)

    def describe(self, job: JobRef) -> dict[str, InstanceStatus] | None:
        statuses = super().describe(job)
        if statuses is None or self.pending_reason is None:
            return statuses
        return {
            host: InstanceStatus(host, InstanceState.PENDING, reason=self.pending_reason)
            for host in statuses
        }

    def console(self, job: JobRef) -> dict[str, str]:
        consoles = super().console(job)
        if self.console_text is None:
            return consoles
        return dict.fromkeys(consoles, self.console_text)
