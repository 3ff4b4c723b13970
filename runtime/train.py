"""The instance entry point (``train`` in images, ``python -m runtime.train`` locally).

Reads the config files, fetches code and channels, launches the entry point under the
requested distribution, ships every output line, uploads the model from the master host,
and reports each phase. The instance's result is reported before the process exits, so
the service never mistakes a finished instance for a lost one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from types import FrameType

from contract import archive, file_confinement, hyperparameters, storage, untrusted, variables
from contract.failure_causes import FailureCause, script_exit_cause
from contract.failures import fit, instance_lost
from contract.images import StoredImage
from contract.instance_config import ConfigError, InstanceConfig, Isolation, load
from contract.layout import (
    CHANNELS_DIR,
    IMAGE_BASE_DIR,
    ChannelFile,
    Paths,
    channel_file,
    checkpoint_dir,
)
from contract.phases import FINAL_PHASES, Phase
from contract.protocol import Endpoint, InterruptionNotice, Stream
from runtime import channels, checkpoints, launch
from runtime.checkpoints import tensorboard
from runtime.instance import (
    credentials_relay,
    image_wait,
    install,
    job_ssh,
    job_user,
    layers,
    own_etc,
    resources,
)
from runtime.instance.environment import launcher_environment, script_environment
from runtime.instance.install import InstallError
from runtime.instance.layers import LayerError, PythonEnvironment
from runtime.instance.peers import PeerWatch
from runtime.launch import (
    as_job_user,
    container,
    container_users,
    handover,
    mpi,
    remote_agent,
)
from runtime.launch.entry_point import EntryPointError, command
from runtime.launch.exit_records import ExitRecords
from runtime.launch.mpi import MpiSetupError
from runtime.launch.workers import GroupResult, Launch, WorkerGroup
from runtime.linux import confine, etc_hosts, namespaces, procfs
from runtime.linux.confine import Confinement
from runtime.reporting import failure, instance_metrics, spot
from runtime.reporting.reporter import LogShipper, ServiceClient

RUNTIME_STREAM: Stream = "runtime"
# Under the base directory: the job's layer, where it has none shared with the job's other
# instances on a machine, and this instance's own (runtime.instance.layers).
JOB_LAYER = ".runyard/job-env"
INSTANCE_LAYER = ".runyard/env"
# Runyard's packages that a job's processes import (the launch shims, the libraries that
# scripts import under SageMaker's names), offered to an image that does not hold them.
RUNTIME_PACKAGES = ("runtime", "libraries", "contract")
# How long the service is tried with a spot notice before the scripts are stopped here:
# a part of the two minutes EC2 gives, the rest left to the scripts.
SPOT_NOTICE_DEADLINE = 30.0
# How long the scripts of an instance that lost the job's network get to end on SIGTERM.
LOST_GRACE = 10.0
# What a login to the instance (over SSH, from another of the job's hosts) starts with of
# the launchers' environment: what finds the image's programs (Python, Open MPI's daemon).
LOGIN_VARIABLES = ("PATH", "LD_LIBRARY_PATH")


class SetupError(Exception):
    """The instance could not be prepared (code, data, entry point); not the script's fault."""


def _is_directory(root: Path, relative: PurePosixPath) -> bool:
    """Whether ``relative`` below ``root`` is a directory (not a link to one), reached
    without following a link on the way."""
    with untrusted.directory(root, relative.parent) as parent:
        found = os.stat(relative.name, dir_fd=parent, follow_symlinks=False)
    return stat.S_ISDIR(found.st_mode)


class Trainer:
    def __init__(
        self, config: InstanceConfig, client: ServiceClient | None, shipper: LogShipper
    ) -> None:
        self.config = config
        self.client = client
        self.shipper = shipper
        # Set by the SIGTERM handler and nothing else: a flag is all a handler may touch.
        self.stop = threading.Event()
        self.checkpoint_sync: checkpoints.CheckpointSync | None = None
        self.tensorboard_sync: checkpoints.CheckpointSync | None = None
        self.spot_watch: spot.SpotNoticeWatcher | None = None
        self.metrics: instance_metrics.Collector | None = None
        # How the job's processes are started where they run as a user of their own.
        self.confinement: Confinement | None = None
        # A custom container's users' ids on the machine, once planned.
        self.container_users: container_users.ContainerUsers | None = None
        # Pipe and FastFile channels serve while the script runs; closed when run() ends.
        self.inputs: channels.Inputs | None = None
        # Why this instance lost the job's network, once it has.
        self.lost: str | None = None
        # Why the runtime itself stopped the scripts, where it did; else the stop came as
        # SIGTERM from outside (the service's stop, max_run, max_wait, a restart).
        self.stopped_here: str | None = None
        # The job's image's lock, held shared while the instance runs on it.
        self.image_hold: int | None = None
        # What a login to the instance starts with (its /etc/environment), once planned.
        self.login_environment: dict[str, str] = {}

    def say(self, message: str) -> None:
        self.shipper.emit(RUNTIME_STREAM, message)

    def report(self, phase: Phase, **fields: object) -> None:
        if self.client is None:
            return
        # Progress is worth a short wait; the final result is worth a long one, since
        # without it the service cannot tell a finished instance from a lost one.
        final = phase in FINAL_PHASES
        self.client.report(phase, fields, deadline_seconds=300.0 if final else 30.0)

    def on_sigterm(self, _signum: int, _frame: FrameType | None) -> None:
        self.stop.set()

    def run(self) -> int:
        try:
            return self._run()
        finally:
            # However the run ends: no Pipe writer left behind, no FastFile mount either.
            if self.inputs is not None:
                self.inputs.close()

    def _run(self) -> int:
        if self.config.isolation == Isolation.NAMESPACES:
            try:
                self.config = self._become_host()
            except (OSError, ConfigError) as exc:
                return self.fail(
                    1,
                    f"InternalServerError: the instance's namespaces: {exc}",
                    FailureCause.PLATFORM_ERROR,
                )
        config = self.config
        paths = config.paths
        self._collect_instance_metrics()
        if config.is_master:
            for notice in config.notices:
                self.say(notice)
        try:
            self.report(Phase.DOWNLOADING)
            if not self._wait_for_image():
                return self._stopped()
            paths.create()
            self._fetch()
        except (
            SetupError,
            storage.StorageError,
            archive.ArchiveError,
            channels.ChannelError,
            image_wait.ImageUnavailable,
        ) as exc:
            return self.fail(1, f"ClientError: {exc}", FailureCause.JOB_CONFIGURATION)
        if self.stop.is_set():
            return self._stopped()
        self.report(Phase.TRAINING)
        try:
            launch_plan = self._plan()
            agent_key = self._prepare_agent()
        except InstallError as exc:
            return self.fail(1, f"InstallError: {exc}", FailureCause.JOB_CONFIGURATION)
        except LayerError as exc:
            return self.fail(
                1, f"InternalServerError: the job's environment: {exc}", FailureCause.PLATFORM_ERROR
            )
        except (EntryPointError, MpiSetupError, container.ContainerSetupError) as exc:
            return self.fail(1, f"ClientError: {exc}", FailureCause.JOB_CONFIGURATION)
        except remote_agent.AgentError as exc:
            return self.fail(1, f"InternalServerError: {exc}", FailureCause.PLATFORM_ERROR)
        try:
            self.confinement = self._hand_over()
        except OSError as exc:
            return self.fail(
                1, f"InternalServerError: the job's user: {exc}", FailureCause.PLATFORM_ERROR
            )
        # Ranks run on every instance (under MPI, started from the first): each uploads.
        try:
            self.checkpoint_sync = checkpoints.start_sync(config, self.say)
            self.tensorboard_sync = tensorboard.start_sync(config, self.say)
        except storage.StorageError as exc:
            self._end_syncs()
            return self.fail(1, f"ClientError: {exc}", FailureCause.JOB_CONFIGURATION)
        self._watch_for_spot_notice()
        try:
            with self._job_network(), self._watching_peers():
                if launch_plan.waits_for_mpi:
                    result = self._wait_for_mpi(agent_key)
                else:
                    result = self._run_scripts(launch_plan)
        except remote_agent.AgentError as exc:
            return self.fail(1, f"InternalServerError: {exc}", FailureCause.PLATFORM_ERROR)
        self._end_syncs()
        if self.lost is not None:
            reason = instance_lost(f"{config.current_host} {self.lost}")
            return self.fail(1, reason, FailureCause.INSTANCE_LOST)
        # A stop that came once the scripts had succeeded stops nothing: their work is done
        # (under mpirun, the first instance's result may end the job, and remove this one,
        # before this instance has seen its daemon go).
        if result.stopped or (self.stop.is_set() and result.exit_code != 0):
            return self._stopped()
        if self.inputs is not None and (input_error := self.inputs.error()) is not None:
            # A channel could not deliver all its data: the script's result cannot stand.
            return self.fail(1, f"ClientError: {input_error}", FailureCause.JOB_CONFIGURATION)
        if lost_daemons := handover.lost(paths.base):
            # An instance went while mpirun ran: its ranks' work is gone, whatever the
            # exit status says.
            reason = instance_lost(f"mpirun lost an instance's daemon: {lost_daemons[0]}")
            return self.fail(result.exit_code or 1, reason, FailureCause.INSTANCE_LOST)
        if result.exit_code != 0:
            if agent_failures := handover.failures(paths.base):
                # mpirun could not start its daemon on an instance: not the script's doing.
                reason = (
                    f"InternalServerError: mpirun could not start its daemon: {agent_failures[0]}"
                )
                return self.fail(result.exit_code, reason, FailureCause.PLATFORM_ERROR)
            return self.fail(result.exit_code, *self._reason(result))
        model_uri = None
        if config.is_master:
            self.report(Phase.UPLOADING)
            try:
                model_uri = self._upload_model()
            except (OSError, storage.StorageError) as exc:
                return self.fail(
                    1,
                    f"UploadError: could not store the model: {exc}",
                    FailureCause.JOB_CONFIGURATION,
                )
            try:
                self._upload_output_data()
            except (OSError, storage.StorageError) as exc:
                return self.fail(
                    1,
                    f"UploadError: could not store the output data: {exc}",
                    FailureCause.JOB_CONFIGURATION,
                )
        # Through nothing the script may have planted there (output/ is its user's); the
        # marker is SageMaker's courtesy, and a job that made room for none still succeeded.
        try:
            untrusted.write_file(paths.base, paths.success.relative_to(paths.base).as_posix(), b"")
        except OSError as exc:
            self.say(f"Could not leave output/success: {exc}")
        self._finish_logs()
        self.report(Phase.COMPLETED, exit_code=0, model_uri=model_uri)
        return 0

    def _become_host(self) -> InstanceConfig:
        """As PID 1 of the instance's own namespaces: its host name, its peers' names, and
        its directory at /opt/ml, from where everything else then reads it."""
        config = self.config
        if config.network_namespace is None:
            raise ConfigError("an instance with namespaces needs its network_namespace")
        namespaces.become_host(
            config.current_host,
            config.host_addresses,
            config.paths.base,
            Path(IMAGE_BASE_DIR),
            config.paths.base / ".runyard" / "hosts",
            config.network_namespace,
            read_only=_shared_paths(config),
            # What the runtime and the job's installs reach over the machine's network.
            machine_names=etc_hosts.url_hosts(
                [*os.environ.values(), *config.spec.environment.values()]
            ),
            resolv_conf=config.resolv_conf,
        )
        os.environ[variables.BASE_DIR] = IMAGE_BASE_DIR
        # Temporary files of its own, as a machine has: the machine's /tmp is shared with
        # other instances, whose processes have the same small pids in their namespaces
        # (Open MPI's daemon names its session directory after its pid), and it stays
        # visible since the job's own paths may lie in it.
        scratch = Path(IMAGE_BASE_DIR) / job_user.SCRATCH
        scratch.mkdir(parents=True, exist_ok=True)
        os.environ["TMPDIR"] = str(scratch)
        return load(Path(IMAGE_BASE_DIR))

    @contextlib.contextmanager
    def _job_network(self) -> Iterator[None]:
        """Where the job's processes run: in the instance's own network namespace, if it has
        one (this runtime keeps the machine's network, to report, fetch and store). A
        container engine puts its container there itself, from the machine's network."""
        if self.config.network_namespace is None or self.config.container_image:
            yield
            return
        with namespaces.network(self.config.network_namespace):
            yield

    @contextlib.contextmanager
    def _watching_peers(self) -> Iterator[None]:
        """While the job's processes run, whether this instance still reaches its peers
        (where it has a network of its own)."""
        config = self.config
        peers = {h: a for h, a in config.host_addresses.items() if h != config.current_host}
        if config.peer_timeout_seconds is None or not peers or config.shared_machine:
            yield
            return
        watch = PeerWatch(peers, config.peer_timeout_seconds, self._lose_network).start()
        try:
            yield
        finally:
            watch.stop()

    def _lose_network(self, why: str) -> None:
        """This instance lost the job's network: its scripts get SIGTERM and a grace to
        save (a script blocked in a collective may never take it), then it reports itself
        lost, and the job restarts from its latest checkpoint."""
        self.lost = why
        self.stopped_here = "this instance lost the job's network"
        self.say(f"This instance {why}: it has lost the job's network; ending its scripts")
        self.stop.set()
        timer = threading.Timer(LOST_GRACE, self._kill_own_processes)
        timer.daemon = True
        timer.start()

    def _kill_own_processes(self) -> None:
        config = self.config
        others = [
            pid
            for pid in procfs.marked_processes(config.job_id, config.current_host)
            if pid != os.getpid()
        ]
        procfs.signal_pids(others, signal.SIGKILL)

    def _hand_over(self) -> Confinement | None:
        """With namespaces, the job's processes run as the job's own user, which owns what
        they write here, and see nothing of the server (``runtime.linux.confine``). A
        custom container's root owns it in the same way, where it is no one on the
        machine (``runtime.launch.container_users``)."""
        config = self.config
        if config.container_image:
            self._hand_over_to_container()
            return None
        if not self._confines():
            return None
        how = job_user.confinement(config, _shared_paths(config))
        job_user.hand_over(config, how.uid, config.paths.base / INSTANCE_LAYER)
        own_etc.show(config, how.uid, self.login_environment)
        if (lacking := job_ssh.prepare(config, how.uid)) is not None:
            self.say(f"SSH between the job's hosts is incomplete: {lacking}")
        return how

    def _hand_over_to_container(self) -> None:
        users = self.container_users
        if users is None:
            return
        if users.root is not None:
            job_user.hand_over(self.config, users.root)
        self.say(users.said)

    def _run_scripts(self, launch_plan: Launch) -> GroupResult:
        started = time.monotonic()
        count = len(launch_plan.specs)
        self.say(f"Starting {count} process(es): {shlex.join(launch_plan.specs[-1].argv)}")
        records = ExitRecords(self.config.paths.base)
        uid = self.confinement.uid if self.confinement is not None else None
        launch_plan = dataclasses.replace(launch_plan, specs=records.attach(launch_plan.specs, uid))
        if self.confinement is not None:
            launch_plan = as_job_user.confined(launch_plan, self.confinement, self.config)
        try:
            group = WorkerGroup(
                launch_plan.specs, self.shipper.emit, self.stop, recorded=records.status
            )
            result = group.run()
        finally:
            if self.config.container_image:
                container.remove(self.config)
        elapsed = time.monotonic() - started
        if result.stopped or self.stop.is_set():
            # The script's own exit code says nothing here: the stop ended it. Which stop
            # it was, the service says: in the job's last line, or its restart's transition.
            cause = (
                self.stopped_here or "the instance got SIGTERM: its job is stopping or restarting"
            )
            self.say(f"Script ended after {elapsed:.1f} s: {cause}")
        else:
            self.say(f"Script exited with code {result.exit_code} after {elapsed:.1f} s")
        return result

    def _fetch(self) -> None:
        config = self.config
        started = time.monotonic()
        in_channel = channel_file(config.spec.source_uri) if config.spec.source_uri else None
        if config.spec.source_uri and in_channel is None:
            self.say(f"Fetching code from {config.spec.source_uri}")
            self._fetch_code()
        self.inputs = channels.open_all(config, self.say)
        if in_channel is not None:
            # With network isolation the SageMaker SDK ships the code in a channel.
            self.say(f"Unpacking code from {config.spec.source_uri}")
            self._unpack_code(in_channel)
        checkpoints.restore(config, self.say)
        try:
            tensorboard.prepare(config)
        except OSError as exc:
            raise SetupError(f"tensorboard_local_path: {exc}") from exc
        self.say(f"Code and data in place after {time.monotonic() - started:.1f} s")

    def _fetch_code(self) -> None:
        """A directory (prefix) is copied as it is; a single object is a tarball."""
        config = self.config
        uri = config.spec.source_uri
        if storage.is_dir(uri):
            storage.fetch(uri, config.paths.code)
        elif storage.scheme(uri) == "file" and storage.is_file(uri):
            with storage.opened_local(uri) as tarball:
                archive.extract(tarball, config.paths.code)
        elif storage.is_file(uri):
            with tempfile.TemporaryDirectory(dir=config.paths.base) as scratch:
                archive.extract(storage.fetch(uri, Path(scratch)), config.paths.code)
        else:
            raise SetupError(f"source {uri} does not exist")

    def _unpack_code(self, found: ChannelFile) -> None:
        """The code a channel brought: a tarball is unpacked, a directory copied, into
        code/, as SageMaker's containers take a submit directory that is a local path.
        Reached from input/data/ without following a link on the way (what a channel
        brings is the job's, not the runtime's to trust), and read from what was opened."""
        config = self.config
        data, relative = config.paths.data, found.below_data
        try:
            if _is_directory(data, relative):
                with untrusted.directory(data, relative) as tree:
                    file_confinement.copy_tree(
                        Path(f"/proc/self/fd/{tree}"), config.paths.code, lambda _name: False
                    )
                return
            fd, _opened = untrusted.open_file(data, relative)
            with os.fdopen(fd, "rb") as tarball:
                archive.extract_open(tarball, Path(found.relative), config.paths.code)
        except untrusted.Refused as exc:
            raise SetupError(
                f"source {config.spec.source_uri}: refused: {CHANNELS_DIR}/{exc}"
            ) from exc
        except FileNotFoundError as exc:
            why = f"source {config.spec.source_uri}: its channel brought no such file"
            raise SetupError(why) from exc

    def _wait_for_image(self) -> bool:
        """Wait while this machine builds the job's image; False if stopped meanwhile."""
        config = self.config
        if not config.image_store:
            return True
        stored = StoredImage(Path(config.image_store), config.image_digest)
        ready = image_wait.wait_for(
            stored, config.image, self.say, show_build=config.is_master, stopped=self.stop.is_set
        )
        if ready:
            # Held (shared) until this runtime ends, closed with the process.
            self.image_hold = image_wait.hold(stored)
        return ready

    def _environment(self) -> PythonEnvironment:
        """The job's Python: its image, the job's layer with its requirements (made by the
        first of its instances on this machine), and this instance's own layer."""
        config = self.config
        python = config.image_python or sys.executable
        image = layers.image(python)
        # An image other than the runtime's own is offered Runyard's packages.
        runtime_root = Path(__file__).resolve().parents[1]
        offered = [] if python == sys.executable else [runtime_root / n for n in RUNTIME_PACKAGES]
        # The runtime's own secrets stay out of pip's reach (and of the build backends it
        # runs from the job's code).
        install_env = {k: v for k, v in os.environ.items() if k not in variables.PRIVATE}
        install_env.update(config.spec.environment)
        if config.download_cache and not {"PIP_CACHE_DIR", "PIP_NO_CACHE_DIR"} & set(
            config.spec.environment
        ):
            install_env["PIP_CACHE_DIR"] = config.download_cache
        job = layers.job_layer(
            Path(config.job_layer) if config.job_layer else config.paths.base / JOB_LAYER,
            image,
            config.paths.code,
            install_env,
            self.say,
            offered=offered,
            should_stop=self.stop.is_set,
            installer=self._installer(install_env),
        )
        return layers.instance_layer(config.paths.base / INSTANCE_LAYER, job)

    def _installer(self, install_env: dict[str, str]) -> layers.Installer | None:
        """Where the job's processes run as its own user (``_hand_over``), its packages
        are installed by that user too: their builds run none of the job's code as root."""
        config = self.config
        if not self._confines():
            return None
        sources = job_user.local_pip_sources(install_env, config)
        how = job_user.installer(config, [*_shared_paths(config), *sources])
        job_user.ready_for_install(config, how.uid)

        def start(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
            return how.start(argv, job_user.job_environment(env, config))

        return layers.Installer(how.uid, start, job_user.own_tree)

    def _confines(self) -> bool:
        """Whether the job's processes run as a user of their own here: with namespaces; a
        custom container is the engine's to confine, and elsewhere the instance is a
        machine of the job's own."""
        config = self.config
        return config.isolation == Isolation.NAMESPACES and not config.container_image

    def _plan(self) -> Launch:
        config = self.config
        gpus, cpus = resources.num_gpus(), resources.num_cpus()
        if config.container_image:
            return self._container_plan(gpus, cpus)
        python = self._environment()
        # The launcher's own processes run without the job's variables, the script with them.
        env = launcher_environment(config, os.environ, num_gpus=gpus, num_cpus=cpus)
        env = _in_job_python(config, python, env)
        self.login_environment = {name: env[name] for name in LOGIN_VARIABLES if name in env}
        script_env = script_environment(config, os.environ, num_gpus=gpus, num_cpus=cpus)
        script_env = _in_job_python(config, python, script_env)
        if config.spec.container_command:
            argv = self._container_command()
        else:
            args = hyperparameters.to_cli_args(config.hyperparameters)
            as_module = install.is_package(config.paths.code)
            argv = command(
                python.python, config.paths.code, config.spec.entry_point, args, as_module=as_module
            )
        return launch.plan(config, argv, env, script_env=script_env, num_gpus=gpus, python=python)

    def _container_plan(self, gpus: int, cpus: int) -> Launch:
        """The job's own image, run in a container that sees this instance as /opt/ml."""
        config = self.config
        base = Path(IMAGE_BASE_DIR)
        inside = dataclasses.replace(
            config, paths=Paths(base, checkpoint_dir(base, config.spec.checkpoint_local_path))
        )
        # Of the runtime's own variables, what reaches S3 with the job's credentials: the
        # relay listens in the instance's network, which the container joins.
        reach = (*storage.S3_ENDPOINT_ENV, *variables.RELAYED_CREDENTIALS)
        inherited = {name: os.environ[name] for name in reach if name in os.environ}
        sm_env = script_environment(inside, inherited, num_gpus=gpus, num_cpus=cpus)
        self.container_users = container_users.for_job(config.container_engine, config.job_id)
        env = container.container_environment(config, sm_env)
        return container.plan(config, env, self.container_users)

    def _container_command(self) -> list[str]:
        """A container entry point reads /opt/ml itself, by that name, and finds Python on
        the PATH, as in a SageMaker image: the job's environment comes first there."""
        config = self.config
        if config.paths.base != Path(IMAGE_BASE_DIR):
            raise SetupError(
                f"a container entry point reads {IMAGE_BASE_DIR} itself, and this instance's "
                f"directory is {config.paths.base}: its instances share the machine "
                "(RUNYARD_LOCAL_ISOLATION=namespaces gives each its own /opt/ml)"
            )
        return list(config.spec.container_command)

    def _prepare_agent(self) -> bytes | None:
        """Under mpirun, the instance is ready for its daemon from now on (the launch
        agents wait until it is). Where instances are separate machines, mpirun reaches
        them through Runyard's own launch agent, authenticated with a key derived from the
        job's token; the first instance leaves the key where mpirun's calls to the agent
        find it."""
        config = self.config
        if config.mode is None or not config.mode.uses_mpi:
            return None
        handover.mark_ready(config.paths.base)
        if config.agent_port is None:
            return None
        key = remote_agent.job_key(os.environ)
        if config.is_master:
            remote_agent.write_key_file(config.paths, key)
        return key

    def _wait_for_mpi(self, agent_key: bytes | None) -> GroupResult:
        config = self.config
        if agent_key is None:
            return mpi.wait_for_daemon(config, self.stop, self.say)
        # The daemon runs as the local agent would run it: in the instance's environment
        # (the job marker included), less what user code must never see.
        env = {k: v for k, v in os.environ.items() if k not in variables.PRIVATE}
        start = None
        if self.confinement is not None:
            env, start = job_user.job_environment(env, config), self.confinement.start
        with remote_agent.serving(config, agent_key, env, self.say, start=start):
            return mpi.wait_for_daemon(config, self.stop, self.say)

    def _reason(self, result: GroupResult) -> tuple[str, FailureCause]:
        """Why the scripts failed, and whose fault that was."""
        config = self.config
        if config.container_image:
            engine = Path(config.container_engine[0]).name if config.container_engine else ""
            refused = container.engine_failure(engine, result.exit_code, result.stderr_tail)
            if refused is not None:
                # The engine could not start the job's image (not found, not pulled).
                return refused, FailureCause.JOB_CONFIGURATION
        if self.confinement is not None:
            refused = confine.refusal(result.exit_code, result.stderr_tail)
            if refused is not None:
                return refused, FailureCause.PLATFORM_ERROR
        reason = failure.reason(result.exit_code, result.stderr_tail, config.paths.failure)
        return reason, script_exit_cause(result.exit_code)

    def _upload_model(self) -> str:
        config = self.config
        uri = storage.model_uri(
            config.spec.output_path, config.job_name, config.spec.output_compression
        )
        with tempfile.TemporaryDirectory(dir=config.paths.base) as scratch:
            if config.spec.output_compression == "NONE":
                for left_out in store_files(config.paths.model, uri, Path(scratch)):
                    self.say(f"Model: {left_out} is not a regular file, left out")
            else:
                tarball = archive.make_tarball(config.paths.model, Path(scratch) / "model.tar.gz")
                storage.put_file(tarball, uri)
        self.say(f"Model stored at {uri}")
        return uri

    def _upload_output_data(self) -> None:
        """As SageMaker does: what the script left in SM_OUTPUT_DATA_DIR (evaluation
        results, plots), packed as output.tar.gz beside the model, when it left anything."""
        config = self.config
        folder = config.paths.output_data
        if not folder.is_dir() or not any(folder.iterdir()):
            return
        uri = storage.output_data_uri(config.spec.output_path, config.job_name)
        with tempfile.TemporaryDirectory(dir=config.paths.base) as scratch:
            tarball = archive.make_tarball(folder, Path(scratch) / "output.tar.gz")
            storage.put_file(tarball, uri)
        self.say(f"Output data stored at {uri}")

    def _keep_output_data(self) -> None:
        """The output data of a job that failed or was stopped: kept if it can be, for
        whoever looks into why; a failure to store it changes nothing of the ending."""
        if not self.config.is_master:
            return
        try:
            self._upload_output_data()
        except (OSError, storage.StorageError) as exc:
            self.say(f"Could not store the output data: {exc}")

    def fail(self, exit_code: int, reason: str, cause: FailureCause) -> int:
        self._end_syncs()
        reason = fit(reason)
        paths = self.config.paths
        if failure.read_failure_file(paths.failure) is None:
            paths.output.mkdir(parents=True, exist_ok=True)
            failure.write_failure_file(paths.failure, reason)
        self._keep_output_data()
        self.say(f"Failed: {reason}")
        self._finish_logs()
        self.report(Phase.FAILED, exit_code=exit_code, failure_reason=reason, failure_cause=cause)
        return exit_code or 1

    def _stopped(self) -> int:
        # As SageMaker does on a stop: keep whatever model the script managed to save.
        model_uri = None
        if (
            self.config.is_master
            and self.config.paths.model.exists()
            and any(self.config.paths.model.iterdir())
        ):
            try:
                model_uri = self._upload_model()
            except (OSError, storage.StorageError) as exc:
                self.say(f"Could not store the model on stop: {exc}")
        self._keep_output_data()
        self.say("Stopped")
        self._finish_logs()
        self.report(Phase.STOPPED, model_uri=model_uri)
        return 0

    def _end_syncs(self) -> None:
        # However the script ended, and before the final report: what it wrote last is
        # stored too (each final sync logs how many files that took).
        syncs = (self.checkpoint_sync, self.tensorboard_sync)
        self.checkpoint_sync = self.tensorboard_sync = None
        for sync in syncs:
            if sync is None:
                continue
            try:
                sync.stop()
            except Exception as exc:  # stop() means never to raise; the result stands
                self.say(f"The final {sync.what} sync failed: {exc!r}")

    def _watch_for_spot_notice(self) -> None:
        """On an EC2 spot instance, tell the service of the two-minute warning: it gives
        the scripts SIGTERM and their grace, then restarts the job on new capacity."""
        client = self.client
        if self.config.spot_notice != "ec2" or client is None:
            return

        def notice(message: str) -> None:
            self.say(f"Spot interruption notice: {message}")
            deadline = time.monotonic() + SPOT_NOTICE_DEADLINE
            # The attempt, so that a notice arriving late cannot interrupt the next one.
            notice = InterruptionNotice(message[:512], attempt=self.config.attempt)
            if not client.post_with_retry(Endpoint.INTERRUPTION, notice, deadline):
                # The notice is EC2's own and the instance goes regardless: the scripts
                # still get their SIGTERM and the time left to checkpoint.
                self.say("Could not tell the service of the notice: stopping the scripts here")
                self.stopped_here = "stopped on a spot interruption notice"
                self.stop.set()

        self.spot_watch = spot.SpotNoticeWatcher(notice).start()

    def _collect_instance_metrics(self) -> None:
        """Once the instance is what it will be (its namespaces entered): its own metrics
        every few seconds, until the final report."""
        seconds = self.config.instance_metrics_seconds
        if self.client is None or seconds <= 0:
            return
        try:
            sampler = instance_metrics.Sampler(self.config.paths.base)
        except OSError as exc:  # no /proc: the job runs all the same
            self.say(f"The instance's metrics cannot be read here: {exc}")
            return
        self.metrics = instance_metrics.Collector(self.client, sampler, seconds).start()

    def _finish_logs(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()
        if self.spot_watch is not None:
            self.spot_watch.stop()
        # Every line is stored before the final report, so a finished job has all its logs.
        self.shipper.close()


def _in_job_python(
    config: InstanceConfig, python: PythonEnvironment, env: dict[str, str]
) -> dict[str, str]:
    """``env`` for a process of the job's: in its Python environment, with its code."""
    env = layers.layer_environment(python, env)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(config.paths.code), env.get("PYTHONPATH")])
    )
    # Collective backends pick their interface from these; the backend knows which one
    # reaches the other instances.
    env.setdefault("GLOO_SOCKET_IFNAME", config.network_interface)
    env.setdefault("NCCL_SOCKET_IFNAME", config.network_interface)
    env.setdefault("TP_SOCKET_IFNAME", config.network_interface)  # torch RPC's TensorPipe
    return env


def _shared_paths(config: InstanceConfig) -> list[Path]:
    """What an instance with namespaces sees read-only: the environment this runtime runs
    from (its interpreter's, and every directory it imports from), Runyard's packages, and
    what the backend names (the server's environment, the image store). Never a directory
    that holds the instance's own, which it writes."""
    runtime_root = Path(__file__).resolve().parents[1]
    candidates = [
        Path(sys.prefix),
        Path(sys.base_prefix),
        *(Path(entry) for entry in sys.path if entry),
        *(runtime_root / name for name in RUNTIME_PACKAGES),
        *(Path(path) for path in config.read_only_paths),
    ]
    own = [config.paths.base.resolve()]
    if config.job_layer:
        own.append(Path(config.job_layer).resolve())
    chosen: list[Path] = []
    for path in sorted({p.resolve() for p in candidates if p.is_dir()}, key=lambda p: len(p.parts)):
        if any(path == c or c in path.parents for c in chosen):
            continue  # under one already chosen
        if any(path == o or path in o.parents for o in own):
            continue
        chosen.append(path)
    return chosen


def store_files(source: Path, uri: str, scratch: Path) -> list[PurePosixPath]:
    """Each regular file below ``source`` stored at its own path below ``uri`` (a model
    stored uncompressed); what is not one (a link, a FIFO) is left out, and returned.

    ``source`` is the job's (its model directory, written by the job's user while this
    root runtime reads it): nothing below it is followed, and a file's bytes are copied
    only from what was opened as a regular file (``contract.untrusted``), into ``scratch``
    first, where the job cannot change them while they are stored."""
    left_out: list[PurePosixPath] = []
    if not source.is_dir():
        return left_out
    copy = scratch / "file"
    for entry in untrusted.walk(source):
        if stat.S_ISDIR(entry.stat.st_mode):
            continue
        if not stat.S_ISREG(entry.stat.st_mode):
            left_out.append(entry.relative)
            continue
        try:
            fd, _opened = entry.open()
        except (untrusted.Refused, FileNotFoundError):  # swapped or gone since listed
            left_out.append(entry.relative)
            continue
        with os.fdopen(fd, "rb") as data, copy.open("wb") as kept:
            shutil.copyfileobj(data, kept)
        storage.put_file(copy, storage.join(uri, *entry.relative.parts))
    return left_out


def main() -> int:
    base = Path(os.environ.get(variables.BASE_DIR, IMAGE_BASE_DIR))
    try:
        config = load(base)
    except ConfigError as exc:
        print(f"runyard runtime: {exc}", file=sys.stderr)
        return 2
    if config.file_roots or config.read_only_roots or config.confine_files:
        # A link made or swapped in since the job was submitted takes it nowhere else.
        file_confinement.confine(config.file_roots, config.read_only_roots)
    client = ServiceClient.from_env(config.job_name, config.current_host, config.attempt)
    shipper = LogShipper(client, first_seq=config.first_log_seq).start()
    trainer = Trainer(config, client, shipper)
    signal.signal(signal.SIGTERM, trainer.on_sigterm)
    try:
        credentials_relay.serve(config, client)
        return trainer.run()
    except Exception as exc:  # a runtime bug must still end as a reported failure
        traceback.print_exc()
        return trainer.fail(
            1,
            f"InternalServerError: the Runyard runtime failed: {exc!r}",
            FailureCause.PLATFORM_ERROR,
        )


if __name__ == "__main__":
    sys.exit(main())
