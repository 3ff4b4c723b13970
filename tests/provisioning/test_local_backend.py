"""The local backend: the exact plan (golden), and real process groups that leave nothing."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import runtime
from contract import agent_hosts, variables
from contract.failure_causes import FailureCause
from provisioning.base import REDACTED, InstanceState, JobRef, LaunchRequest, Materialized
from provisioning.local import processes
from provisioning.local.backend import HOSTS_FILE, LocalBackend, LocalPlan, share_cpus
from tests.instances import JOB_ID, launch_request
from tests.timeouts import scaled

ENVIRON = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "DATABASE_PASSWORD": "x"}


def _backend(tmp_path: Path, python: str = "/opt/python/bin/python3") -> LocalBackend:
    # The instances share the machine here (test_local_namespaces.py has the rest).
    return LocalBackend(
        tmp_path / "jobs",
        python=python,
        environ=ENVIRON,
        allocate_port=lambda: 29500,
        cpus=[0, 1, 2, 3, 4],
        isolation="shared",
    )


def _request(tmp_path: Path, **spec: object) -> LaunchRequest:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text("print('x')\n")
    request = launch_request(source, **spec)
    tokens = {host: f"ryi_secret-{host}" for host in request.hosts}
    return LaunchRequest(request.job, request.spec, "http://127.0.0.1:8642", tokens)


def test_dry_run_is_the_exact_plan(tmp_path: Path) -> None:
    request = _request(
        tmp_path,
        instance_count=2,
        hyperparameters={"epochs": 3, "model": "net"},
        distribution={"torch_distributed": {"enabled": True}},
        environment={"MY_FLAG": "1"},
    )
    materialized = _backend(tmp_path).materialize(request)
    jobs = tmp_path / "jobs" / JOB_ID
    second = materialized.public["instances"][1]
    assert second["host"] == "algo-2"
    assert second["argv"] == ["/opt/python/bin/python3", "-m", "runtime.train"]
    assert second["base_dir"] == str(jobs / "algo-2")
    assert [instance["cpus"] for instance in materialized.public["instances"]] == [[0, 1], [2, 3]]
    assert second["env"] == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "SM_BASE_DIR": str(jobs / "algo-2"),
        "RUNYARD_SERVICE_URL": "http://127.0.0.1:8642",
        "RUNYARD_JOB_NAME": "job-1",
        "RUNYARD_JOB_ID": JOB_ID,
        "RUNYARD_HOST": "algo-2",
        "RUNYARD_JOB_TOKEN": REDACTED,
        "RUNYARD_AGENT_KEY": REDACTED,
    }
    files = second["files"]
    assert json.loads(files["input/config/hyperparameters.json"]) == {
        "epochs": "3",
        "model": '"net"',
    }
    assert json.loads(files["input/config/resourceconfig.json"]) == {
        "current_host": "algo-2",
        "current_instance_type": "local",
        "current_group_name": "homogeneousCluster",
        "hosts": ["algo-1", "algo-2"],
        "network_interface_name": "lo",
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": "local",
                "hosts": ["algo-1", "algo-2"],
            }
        ],
        "host_addresses": {"algo-1": "127.0.0.1", "algo-2": "127.0.0.1"},
    }
    runyard = json.loads(files["input/config/runyard.json"])
    # What the instances see read-only (with namespaces): the server's environment and
    # code, and the image store.
    shared = runyard.pop("read_only_paths")
    runtime_package = str(Path(runtime.__file__).parent)
    assert {sys.prefix, sys.base_prefix, str(tmp_path / "images"), runtime_package} <= set(shared)
    assert runyard == {
        "job_name": "job-1",
        "job_id": JOB_ID,
        # The job's own description, as its record has it.
        "spec": {
            "entry_point": "train.py",
            "source_uri": (tmp_path / "src").as_uri(),
            "instance_type": "local",
            "output_path": (tmp_path / "artifacts").as_uri(),
            "output_compression": "GZIP",
            "instance_count": 2,
            "volume_size": 30,
            "framework": "pytorch",
            "image_uri": None,
            # In hyperparameters.json alone (above): the instance reads them back from it.
            "hyperparameters": {},
            "distribution": {"torch_distributed": {"enabled": True}},
            "inputs": {},
            "environment": {"MY_FLAG": "1"},
            "checkpoint_s3_uri": None,
            "checkpoint_local_path": None,
            "tensorboard_s3_output_path": None,
            "tensorboard_local_path": None,
            "use_spot_instances": False,
            "container_entrypoint": [],
            "container_arguments": [],
            "enable_network_isolation": False,
            "image": {"image": "builtin", "container": None, "note": None},
        },
        "master_addr": "127.0.0.1",
        "master_port": 29500,
        "launch_agent": [
            "/opt/python/bin/python3",
            "-m",
            "runtime.launch.local_agent",
            str(jobs / "hosts.json"),
        ],
        "agent_port": None,  # one machine: mpirun reaches instances through the local agent
        "shared_machine": True,
        "attempt": 0,
        "first_log_seq": 1,
        "spot_notice": None,
        "isolation": "shared",
        "network_namespace": None,
        "resolv_conf": "",
        "notices": [
            "The instances of this job share this machine's host name and network: "
            "RUNYARD_LOCAL_ISOLATION is shared"
        ],
        "peer_timeout_seconds": None,
        # The built-in image: the runtime's own interpreter, nothing to wait for.
        "image": "builtin",
        "image_python": "",
        "image_store": "",
        "image_digest": "",
        # Shared by the job's instances on this machine; beside the jobs, pip's cache.
        "job_layer": str(jobs / "job-env"),
        "download_cache": str(tmp_path / "cache" / "pip"),
        # Instances that share the machine have no covers (their processes are the server's).
        "hidden_paths": [],
        # Nor SSH between them: they have no network of their own (runtime.instance.job_ssh).
        "ssh": False,
        "file_roots": [],
        "read_only_roots": [],
        "confine_files": False,
        "container_image": "",
        "container_engine": [],
        # Whether the service gives the job AWS credentials: the request says (the worker
        # sets it from RUNYARD_INSTANCE_CREDENTIALS).
        "aws_credentials": False,
        "instance_metrics_seconds": 10.0,
    }
    # The real token is in the plan that apply() uses, never in what a dry run shows.
    assert materialized.plan.instances[1].env["RUNYARD_JOB_TOKEN"] == "ryi_secret-algo-2"
    assert "ryi_secret" not in materialized.render()
    assert not (tmp_path / "jobs").exists()


def _fake_runtime(
    tmp_path: Path, script: str
) -> tuple[LocalBackend, Materialized[LocalPlan], JobRef]:
    """A real plan whose instances run ``script`` instead of the runtime, so process
    handling is tested on its own."""
    program = tmp_path / "fake_runtime.py"
    program.write_text(script)
    backend = LocalBackend(
        tmp_path / "jobs", python=sys.executable, teardown_grace=2.0, isolation="shared"
    )
    request = _request(tmp_path, instance_count=2)
    materialized = backend.materialize(request)
    for instance in materialized.plan.instances:
        instance.argv[:] = [sys.executable, str(program)]
    return backend, materialized, request.job


def test_apply_is_idempotent_and_teardown_leaves_nothing(tmp_path: Path) -> None:
    script = (
        "import os, subprocess, sys, time\n"
        # A grandchild that leaves the group: only the job marker still finds it.
        "subprocess.Popen(['setsid', sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "time.sleep(120)\n"
    )
    backend, materialized, job = _fake_runtime(tmp_path, script)
    backend.apply(materialized)
    hosts = ["algo-1", "algo-2"]
    first = {host: _pid(tmp_path, host) for host in hosts}
    backend.apply(materialized)  # a retried launch adopts, it does not start twice
    assert {host: _pid(tmp_path, host) for host in hosts} == first
    # The instances' scripts can read the job directory: no credential may be left there.
    assert "ryi_secret" not in (tmp_path / "jobs" / JOB_ID / "plan.json").read_text()

    statuses = backend.describe(job)
    assert statuses is not None
    assert {s.state for s in statuses.values()} == {InstanceState.RUNNING}
    _wait_for(lambda: len(processes.marked_processes(job.id)) >= 4)

    backend.teardown(job)
    assert processes.marked_processes(job.id) == []
    assert backend.describe(job) is None
    assert not (tmp_path / "jobs" / JOB_ID).exists()


def test_the_hosts_file_gives_the_launch_agent_each_instance_without_its_token(
    tmp_path: Path,
) -> None:
    backend, materialized, job = _fake_runtime(tmp_path, "")
    backend.apply(materialized)
    try:
        path = tmp_path / "jobs" / JOB_ID / HOSTS_FILE
        written = agent_hosts.read(path)
        text = path.read_text()
    finally:
        backend.teardown(job)
    planned = {instance.host: instance for instance in materialized.plan.instances}
    assert list(written) == list(planned) == ["algo-1", "algo-2"]
    for host, entry in written.items():
        assert (entry.base, entry.cpus) == (planned[host].base_dir, planned[host].cpus)
        assert entry.cwd == str(Path(entry.base) / "code")
        assert entry.env[variables.BASE_DIR] == entry.base
        assert not set(variables.PRIVATE) & set(entry.env)
    assert "ryi_secret" not in text


def test_teardown_reaches_an_unmarked_child_after_the_runtime_died(tmp_path: Path) -> None:
    # The "runtime" leaves a script behind and dies; the script's child wiped its
    # environment, so only its process group ties it to the job.
    script = (
        "import subprocess, sys\n"
        "code = 'import subprocess, sys, time; "
        'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={}); '
        "time.sleep(120)'\n"
        "subprocess.Popen([sys.executable, '-c', code])\n"
    )
    backend, materialized, job = _fake_runtime(tmp_path, script)
    backend.apply(materialized)
    try:
        leaders = [
            processes.ProcessId(
                **json.loads((tmp_path / "jobs" / JOB_ID / f"{h}.pid.json").read_text())
            )
            for h in ("algo-1", "algo-2")
        ]
        # Two members may also be the runtime and the script's child, before the grandchild
        # starts: first the runtime dies, then its group holds the two it left.
        _wait_for(lambda: not any(processes.is_alive(leader) for leader in leaders))
        _wait_for(lambda: all(len(processes.group_members(leader.pid)) == 2 for leader in leaders))
        assert not any(processes.is_alive(leader) for leader in leaders)
    finally:
        # Whatever happened: left running, the script's child (marked as this job's, whose
        # id every test here shares) would read as the next tests' instances.
        backend.teardown(job)
    assert all(processes.group_members(leader.pid) == [] for leader in leaders)


def test_exited_instance_is_reported_with_its_code_and_last_words(tmp_path: Path) -> None:
    backend, materialized, job = _fake_runtime(
        tmp_path, "print('dying now', flush=True)\nraise SystemExit(7)\n"
    )
    backend.apply(materialized)

    def exited() -> bool:
        statuses = backend.describe(job) or {}
        return all(s.state == InstanceState.EXITED for s in statuses.values())

    _wait_for(exited)
    status = (backend.describe(job) or {})["algo-1"]
    assert status.exit_code == 7
    assert "dying now" in status.last_output
    # A runtime reports before it exits: one that exited without a word was lost.
    assert status.cause == FailureCause.INSTANCE_LOST
    backend.teardown(job)


def test_an_instance_told_to_end_from_outside_reads_as_stopped(tmp_path: Path) -> None:
    backend, materialized, job = _fake_runtime(
        tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"
    )
    backend.apply(materialized)

    def exited() -> bool:
        statuses = backend.describe(job) or {}
        return all(s.state == InstanceState.EXITED for s in statuses.values())

    _wait_for(exited)
    status = (backend.describe(job) or {})["algo-1"]
    assert (status.exit_code, status.cause) == (143, FailureCause.INSTANCE_STOPPED)
    backend.teardown(job)


def test_instances_split_the_machine() -> None:
    assert share_cpus([3, 1, 0, 2], 1) == [[0, 1, 2, 3]]
    assert share_cpus([0, 1, 2, 3], 3) == [[0], [1], [2]]
    assert share_cpus([0, 1], 3) == [[0], [1], [0]]


def test_instance_runs_on_its_share_of_cpus(tmp_path: Path) -> None:
    available = sorted(os.sched_getaffinity(0))
    script = "import os; print(sorted(os.sched_getaffinity(0)), flush=True)"
    backend, materialized, job = _fake_runtime(tmp_path, script)
    backend.apply(materialized)
    _wait_for(
        lambda: all(s.state == InstanceState.EXITED for s in (backend.describe(job) or {}).values())
    )
    statuses = backend.describe(job) or {}
    shares = share_cpus(available, 2)
    assert [statuses[host].last_output for host in ("algo-1", "algo-2")] == [
        str(shares[0]),
        str(shares[1]),
    ]
    backend.teardown(job)


def test_two_jobs_of_one_name_run_side_by_side(tmp_path: Path) -> None:
    # Names repeat across projects: each job keeps its own directory and processes.
    backend, materialized, job = _fake_runtime(tmp_path, "import time; time.sleep(60)")
    backend.apply(materialized)
    twin = JobRef("1" * 32, job.name)
    request = _request(tmp_path, instance_count=2)
    replacement = backend.materialize(LaunchRequest(twin, request.spec, "http://x", request.tokens))
    for instance in replacement.plan.instances:
        instance.argv[:] = [sys.executable, "-c", "import time; time.sleep(60)"]
    backend.apply(replacement)
    try:
        for ref in (job, twin):
            statuses = backend.describe(ref) or {}
            assert [s.state for s in statuses.values()] == [InstanceState.RUNNING] * 2
            # A process just forked shows its parent's environment until it has exec'd.
            _wait_for(lambda ref=ref: len(processes.marked_processes(ref.id)) >= 2)
    finally:
        backend.teardown(twin)
    assert processes.marked_processes(twin.id) == []
    assert processes.marked_processes(job.id) != []  # the other job's are untouched
    backend.teardown(job)


def test_pid_reuse_is_not_mistaken_for_the_instance() -> None:
    me = processes.identify(os.getpid())
    assert me is not None
    assert processes.is_alive(me)
    assert not processes.is_alive(processes.ProcessId(me.pid, me.start_ticks + 1))


def test_a_child_still_exiting_at_teardown_is_reaped_not_dropped() -> None:
    # As when teardown finds an instance gone while its exit is still under way: /proc no
    # longer shows its job marker, and it is not yet a zombie.
    # Its interpreter up before teardown comes (a loaded machine can take longer than the
    # wait to start one), then a moment from its exit.
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print(flush=True); time.sleep(0.3)"],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    child.stdout.readline()
    child.stdout.close()
    pid = child.pid
    processes.remember_child(child)
    del child
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        processes.forget_child(pid, timeout=scaled(processes.REAP_WAIT_SECONDS))
        gc.collect()
    # Only this child's: the collection may find what earlier tests of this process dropped.
    dropped = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert [w for w in dropped if f"subprocess {pid} " in str(w.message)] == []
    assert not Path(f"/proc/{pid}").exists()  # reaped: not even a zombie is left


def test_a_child_still_running_after_the_wait_stays_remembered() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        processes.remember_child(child)
        processes.forget_child(child.pid, timeout=0.1)
    finally:
        child.kill()  # whatever happened, the sleeper does not outlive the test
        child.wait()
    # Still known: its exit code is read as for any instance of this process.
    assert processes.child_exit_code(child.pid) == 137
    processes.forget_child(child.pid)
    assert processes.child_exit_code(child.pid) is None


def _pid(tmp_path: Path, host: str) -> int:
    return int(json.loads((tmp_path / "jobs" / JOB_ID / f"{host}.pid.json").read_text())["pid"])


def _wait_for(condition, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("condition not met in time")
        time.sleep(0.05)


def test_console_is_what_each_instance_printed_until_teardown(tmp_path: Path) -> None:
    script = "import os; print('cannot reach the service', os.environ['RUNYARD_HOST'])\n"
    backend, materialized, job = _fake_runtime(tmp_path, script)
    backend.apply(materialized)
    _wait_for(
        lambda: all(s.state == InstanceState.EXITED for s in (backend.describe(job) or {}).values())
    )
    assert backend.console(job) == {
        "algo-1": "cannot reach the service algo-1\n",
        "algo-2": "cannot reach the service algo-2\n",
    }
    backend.teardown(job)
    assert backend.console(job) == {}
