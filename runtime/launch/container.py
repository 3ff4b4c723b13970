"""A custom container: the job's own OCI image runs on the instance, as SageMaker runs a
bring-your-own container (``docker run <image> train``).

The runtime stays outside the container, as SageMaker's agent does: it has fetched the code
and channels into the instance's directory, which the container sees as ``/opt/ml``, and
it ships what the container prints, uploads what it leaves in ``/opt/ml/model`` and reports
its exit. The container joins the instance's network namespace on the job's network under
its SageMaker host name, with every host's name and address resolving both ways from an
/etc/hosts of the instance's own (``runtime.linux.etc_hosts``). Its environment is the job's
``environment`` and the ``SM_*`` contract (paths under ``/opt/ml``), plus
``SAGEMAKER_PROGRAM`` and ``SAGEMAKER_SUBMIT_DIRECTORY`` for SageMaker's training toolkit
when the job names an entry point; never the runtime's own variables. It runs ``train``
(through the image's entry point, if it has one), or the job's container entry point.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

from contract import variables
from contract.containers import LABEL_HOST, LABEL_JOB_ID, container_name
from contract.instance_config import InstanceConfig
from contract.layout import IMAGE_BASE_DIR
from runtime.launch.container_users import ContainerUsers
from runtime.launch.workers import Launch, WorkerSpec
from runtime.linux import etc_hosts

# Where the container's variables are written for the engine (readable by root alone, not
# on a command line that every process may read).
ENV_FILE = ".runyard/container.env"
# The container's /etc/hosts, in place of the engine's, which names neither the IPv4-mapped
# forms of the job's addresses nor (podman's) ::1, so their lookups would wait on a DNS
# server the job's network cannot reach, and fail.
HOSTS_FILE = ".runyard/container-hosts"
# Podman lowers its own limit on processes to this many when it has more, and a container
# cannot be given more than the process that starts it has: without CAP_SYS_RESOURCE, a
# request above that fails (``setrlimit RLIMIT_NPROC: Operation not permitted``).
PODMAN_NPROC = 32768
# The engines' own default, where the instance has no limit on open files.
OPEN_FILES = 1048576


class ContainerSetupError(Exception):
    """The container cannot be started as the job asks; the message says why."""


def plan(config: InstanceConfig, env: dict[str, str], users: ContainerUsers | None) -> Launch:
    """``env``: the container's variables; ``users``: its users' ids on the machine. The
    engine itself runs with the runtime's own variables (the job's marker included, so
    whatever the engine leaves behind is found as the job's), less the instance's private
    ones."""
    engine = list(config.container_engine)
    found = shutil.which(engine[0]) if engine else None
    if found is None:
        raise ContainerSetupError(f"the container engine {engine[:1]} is not on this machine")
    env_file = config.paths.base / ENV_FILE
    write_env_file(env_file, env)
    hosts_file = config.paths.base / HOSTS_FILE
    hosts_file.write_text(etc_hosts.text(config.current_host, config.host_addresses))
    argv = [found, *engine[1:], *run_arguments(config, env_file, users)]
    engine_env = {k: v for k, v in os.environ.items() if k not in variables.PRIVATE}
    return Launch([WorkerSpec(argv, engine_env, config.paths.base)])


def run_arguments(
    config: InstanceConfig, env_file: Path, users: ContainerUsers | None = None
) -> list[str]:
    """``run ...`` for the engine (podman and Docker take the same, but the user mapping,
    podman's alone)."""
    host = config.current_host
    argv = [
        "run", "--rm", "--replace",
        "--name", container_name(config.job_id, host, config.attempt),
        "--label", f"{LABEL_JOB_ID}={config.job_id}",
        "--label", f"{LABEL_HOST}={host}",
        "--hostname", host,
        "--volume", f"{config.paths.base}:{IMAGE_BASE_DIR}",
        "--env-file", str(env_file),
        "--cpuset-cpus", ",".join(map(str, sorted(os.sched_getaffinity(0)))),
        "--shm-size", f"{_half_of_memory()}b",
        *_limits(),
        *UNPRIVILEGED,
        *(users.arguments() if users is not None else []),
    ]  # fmt: skip
    if config.network_namespace:
        argv += ["--network", f"ns:{config.network_namespace}"]
    # Both engines leave a bind-mounted /etc/hosts as it is.
    argv += ["--volume", f"{config.paths.base / HOSTS_FILE}:/etc/hosts"]
    checkpoints = config.paths.checkpoints
    if not checkpoints.is_relative_to(config.paths.base):
        # A checkpoint_local_path outside /opt/ml: the same path inside the container.
        checkpoints.mkdir(parents=True, exist_ok=True)
        argv += ["--volume", f"{checkpoints}:{checkpoints}"]
    command: list[str] = ["train"]
    if config.spec.container_command:
        first, *rest = config.spec.container_command
        argv += ["--entrypoint", json.dumps([first])]
        command = rest
    return [*argv, config.container_image, *command]


# Every capability dropped, and none to be gained (setuid files, file capabilities). None
# is added back, as the contract needs none: Runyard's runtime stays outside the container
# (it fetches, ships, uploads and reports from there), so nothing in it changes a file's
# owner (CAP_CHOWN), becomes the job's user (CAP_SETUID, CAP_SETGID: the container's root,
# in a user namespace of its own, is no one on the machine already) or listens on port 22
# (CAP_NET_BIND_SERVICE: SSH between hosts is the namespaces instances'). What SageMaker's
# contract has a container write, /opt/ml and its own image's files, its root owns.
UNPRIVILEGED = ("--cap-drop", "ALL", "--security-opt", "no-new-privileges")

# What podman and Docker exit with when they could not run the container at all (their
# own error, the command could not be run, or not found), rather than the container's code.
ENGINE_EXITS = (125, 126, 127)


def engine_failure(engine: str, exit_code: int, stderr_tail: list[str]) -> str | None:
    """The failure reason when the engine could not start the container (an image it
    cannot find or pull, an OCI runtime that refuses this machine), or None."""
    said = [line.strip() for line in stderr_tail if line.strip().startswith("Error:")]
    if exit_code not in ENGINE_EXITS or not said:
        return None
    return f"CannotStartContainerError: {engine} could not start the container: {said[-1]}"


def container_environment(config: InstanceConfig, sm_env: dict[str, str]) -> dict[str, str]:
    """The container's variables: the job's own and the SM_* contract, and what SageMaker's
    toolkit reads to find the script, when the job names one."""
    env = {k: v for k, v in sm_env.items() if k not in variables.PRIVATE}
    if config.spec.entry_point:
        env.setdefault("SAGEMAKER_PROGRAM", config.spec.entry_point)
        env.setdefault("SAGEMAKER_SUBMIT_DIRECTORY", f"{IMAGE_BASE_DIR}/code")
    return env


def write_env_file(path: Path, env: dict[str, str]) -> None:
    """One ``NAME=value`` line each, as the engines read ``--env-file``: a value with a
    line break cannot be written there, and is refused naming it."""
    broken = sorted(name for name, value in env.items() if "\n" in value or "\r" in value)
    if broken:
        raise ContainerSetupError(
            f"environment variable {broken[0]} holds a line break, which a container's "
            "environment cannot be given"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.writelines(f"{name}={value}\n" for name, value in sorted(env.items()))


def _limits() -> list[str]:
    """The instance's own limits on open files and processes: an engine's defaults are
    higher, and raising a limit needs CAP_SYS_RESOURCE, which a server's root may lack."""
    _soft, files = resource.getrlimit(resource.RLIMIT_NOFILE)
    _soft, processes = resource.getrlimit(resource.RLIMIT_NPROC)
    files = min(files, OPEN_FILES)  # RLIM_INFINITY is the largest number of all
    processes = min(processes, PODMAN_NPROC)
    return [
        "--ulimit", f"nofile={files}:{files}",
        "--ulimit", f"nproc={processes}:{processes}",
    ]  # fmt: skip


def remove(config: InstanceConfig) -> None:
    """Remove the instance's container if the engine left it (its engine was killed before
    the container ended); what fails here, the backend's teardown does again by label."""
    engine = list(config.container_engine)
    found = shutil.which(engine[0]) if engine else None
    if found is None:
        return
    name = container_name(config.job_id, config.current_host, config.attempt)
    for step in (["kill", name], ["rm", "--force", name]):  # what podman and Docker share
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [found, *engine[1:], *step], capture_output=True, timeout=60, check=False
            )


def _half_of_memory() -> int:
    """Shared memory of half the machine's, as a machine's own would have (the engines'
    64 MiB default is too little for NCCL and torch's data loaders)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
