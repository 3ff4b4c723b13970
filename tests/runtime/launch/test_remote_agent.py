"""The launch agent for instances that are separate machines, as real processes on real
sockets: the server inside this test (as inside a runtime), the client as mpirun runs it.

algo-1 is 127.0.0.1 and algo-2 127.0.0.2: both loopback on Linux, so each instance has an
address of its own, as pods do, with no network set up.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest

from contract import variables
from contract.instance_config import InstanceConfig, load
from provisioning.base import JobRef, LaunchRequest
from provisioning.local.backend import free_port
from runtime.launch import handover, remote_agent
from runtime.linux import procfs
from tests.conftest import require
from tests.instances import launch_request, start_runtime, write_networked_instances

ADDRESSES = {"algo-1": "127.0.0.1", "algo-2": "127.0.0.2"}
TOKEN = "job-token-for-tests"
AGENT = [sys.executable, "-m", "runtime.launch.remote_agent"]
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "scripts"


@dataclass
class Cluster:
    job_id: str
    bases: dict[str, Path]
    key: bytes
    logs: list[str]

    def config(self, host: str) -> InstanceConfig:
        return load(self.bases[host])

    def serve(self, **options: float) -> AbstractContextManager[remote_agent.AgentServer]:
        """algo-2's server, with the environment its runtime would give commands."""
        env = {
            "PATH": os.environ["PATH"],
            variables.JOB_ID: self.job_id,
            variables.HOST: "algo-2",
        }
        config = self.config("algo-2")
        return remote_agent.serving(config, self.key, env, self.logs.append, **options)

    def client_env(self, patience: float = 5.0) -> dict[str, str]:
        """What mpirun on algo-1 hands its launch agent: the launcher's environment."""
        return {
            **os.environ,
            "SM_BASE_DIR": str(self.bases["algo-1"]),
            variables.AGENT_CONNECT_TIMEOUT: str(patience),
        }

    def run_client(self, command: str, patience: float = 5.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*AGENT, "algo-2", command],
            env=self.client_env(patience),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def start_client(self, command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*AGENT, "algo-2", command],
            env=self.client_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def _request(source: Path, job_id: str) -> LaunchRequest:
    request = launch_request(
        source,
        instance_count=2,
        distribution={
            "mpi": {
                "enabled": True,
                "processes_per_host": 1,
                # Open MPI's hierarchical collectives hang when every "node" holds one
                # rank and all are one machine (local_agent too); real nodes are apart.
                "custom_mpi_options": "--mca coll ^han",
            }
        },
    )
    # A job id of its own, so that no other test's processes look like this job's.
    return dataclasses.replace(request, job=JobRef(id=job_id, name=request.job.name))


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    source = tmp_path / "src"
    source.mkdir()
    job_id = uuid.uuid4().hex
    bases = write_networked_instances(
        tmp_path / "job",
        _request(source, job_id),
        addresses=ADDRESSES,
        agent_port=free_port(),
        launch_agent=AGENT,
    )
    for base in bases.values():
        (base / "code").mkdir(parents=True)
    key = remote_agent.job_key({variables.AGENT_KEY: TOKEN})
    remote_agent.write_key_file(load(bases["algo-1"]).paths, key)
    return Cluster(job_id, bases, key, [])


# algo-2's agent in a process of its own, as in its runtime: argv base directory, key.
SERVE_ALONE = """
import os, sys, time
from pathlib import Path
from contract.instance_config import load
from runtime.launch import remote_agent
env = {key: os.environ[key] for key in ("PATH", "RUNYARD_JOB_ID", "RUNYARD_HOST")}
with remote_agent.serving(load(Path(sys.argv[1])), bytes.fromhex(sys.argv[2]), env, print):
    print("serving", flush=True)
    time.sleep(120)
"""


def _wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def _started(client: subprocess.Popen[str]) -> list[procfs.ProcessId]:
    """The pids the remote command printed first: its shell and its background children."""
    assert client.stdout is not None
    pids = [procfs.identify(int(pid)) for pid in client.stdout.readline().split()]
    alive = [pid for pid in pids if pid is not None]
    assert len(alive) == len(pids) >= 2, pids
    return alive


def test_output_and_exit_status_are_relayed(cluster: Cluster) -> None:
    code_dir = cluster.bases["algo-2"] / "code"
    with cluster.serve():
        done = cluster.run_client(
            'echo "out on $RUNYARD_HOST in $PWD"; echo err >&2; '
            "head -c 300000 /dev/zero | tr '\\0' x; exit 3"
        )
        killed = cluster.run_client("kill -9 $$")
    assert done.returncode == 3, done.stderr
    first, rest = done.stdout.split("\n", 1)
    assert first == f"out on algo-2 in {code_dir}"
    assert rest == "x" * 300_000  # more than one frame's worth
    assert done.stderr == "err\n"
    assert killed.returncode == 128 + 9  # as a shell reports a signal
    # Commands that ended, whatever their status, lost no instance.
    assert handover.lost(cluster.bases["algo-1"]) == []
    assert len([line for line in cluster.logs if "running a command for 127.0." in line]) == 2


def test_a_client_without_the_jobs_key_is_refused(cluster: Cluster) -> None:
    master = cluster.config("algo-1")
    remote_agent.write_key_file(master.paths, remote_agent.job_key({"RUNYARD_AGENT_KEY": "other"}))
    with cluster.serve():
        done = cluster.run_client("touch ran")
    assert done.returncode == 255
    assert "refused the command: authentication failed" in done.stderr
    assert TOKEN not in done.stderr
    assert not (cluster.bases["algo-2"] / "code" / "ran").exists()
    assert any(
        re.match(
            r"Launch agent: refused the connection from 127\.0\.0\.\d+:\d+: authentication", line
        )
        for line in cluster.logs
    ), cluster.logs


def _frame(kind: bytes, payload: bytes) -> bytes:
    return struct.pack("!cI", kind, len(payload)) + payload


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def test_unauthenticated_connections_are_refused(cluster: Cluster) -> None:
    port = cluster.config("algo-2").agent_port
    assert port is not None
    body = json.dumps({"host": "algo-2", "command": "touch ran"}).encode()
    forged = secrets.token_bytes(32) + secrets.token_bytes(32) + body
    with cluster.serve(handshake_timeout=1.0):
        with socket.create_connection(("127.0.0.2", port), timeout=10) as sock:
            sock.sendall(_frame(b"R", forged))
            answer = _read_all(sock)
        with socket.create_connection(("127.0.0.2", port), timeout=10) as silent:
            silence = _read_all(silent)  # says nothing: closed after the handshake timeout
    # The challenge (5 + 32 bytes), then a refusal, then the end of the connection.
    assert answer[:5] == b"C\x00\x00\x00\x20"
    assert answer[37:38] == b"N"
    assert b"authentication failed" in answer[42:]
    assert silence[37:38] == b"N"
    assert b"no launch request in time" in silence[42:]
    assert not (cluster.bases["algo-2"] / "code" / "ran").exists()
    refusals = [line for line in cluster.logs if "refused the connection" in line]
    assert len(refusals) == 2, cluster.logs


def test_killing_the_client_kills_the_remote_process_group(cluster: Cluster) -> None:
    # Deaf to SIGTERM, all of them, and one in a session of its own, as Open MPI's daemon
    # puts itself: only the agent's SIGKILL, to the group and to its marker, ends them.
    command = 'trap "" TERM; sleep 60 & child=$!; setsid sleep 60 & echo "$$ $child $!"; wait'
    with cluster.serve():
        client = cluster.start_client(command)
        with client:
            processes = _started(client)
            client.kill()
        _wait_until(
            lambda: not any(procfs.is_alive(p) for p in processes),
            timeout=10,
            what="the remote shell and its child are gone",
        )
    assert any("dropped; ending its command" in line for line in cluster.logs), cluster.logs


def test_stopping_the_server_ends_the_commands_still_running(cluster: Cluster) -> None:
    with cluster.serve(stop_grace=0.5):
        client = cluster.start_client(
            'sleep 60 & child=$!; setsid sleep 60 & echo "$$ $child $!"; wait'
        )
        processes = _started(client)
    assert not any(procfs.is_alive(p) for p in processes)
    with client:
        assert client.wait(timeout=10) != 0


def test_an_instance_that_goes_while_its_command_runs_is_recorded_lost(cluster: Cluster) -> None:
    # algo-2's machine dies: its agent, and the connection with it, go at once (the
    # runtime then fails the job as an instance lost, whatever mpirun's exit status).
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE_ALONE, str(cluster.bases["algo-2"]), cluster.key.hex()],
        env={**os.environ, variables.JOB_ID: cluster.job_id, variables.HOST: "algo-2"},
        stdout=subprocess.PIPE,
        text=True,
    )
    with server:
        assert server.stdout is not None
        assert "serving" in iter(lambda: server.stdout.readline().strip(), "")  # type: ignore[union-attr]
        client = cluster.start_client('sleep 60 & echo "$$ $!"; wait')
        processes = _started(client)
        server.kill()
    with client:
        assert client.wait(timeout=10) != 0
    procfs.signal_pids([process.pid for process in processes], signal.SIGKILL)
    [lost] = handover.lost(cluster.bases["algo-1"])
    assert lost.startswith("lost the connection to the launch agent of algo-2")
    assert handover.failures(cluster.bases["algo-1"]) == []


def test_the_client_gives_up_as_ssh_does_when_no_agent_listens(cluster: Cluster) -> None:
    started = time.monotonic()
    done = cluster.run_client("true", patience=1.0)
    assert done.returncode == 255
    assert "could not reach the launch agent of algo-2 at 127.0.0.2:" in done.stderr
    assert time.monotonic() - started < 10


def _agent_calls(job_id: str, host: str) -> list[int]:
    """Processes of the job running the launch agent's client for ``host``."""
    found = []
    for pid in procfs.marked_processes(job_id, "algo-1"):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"runtime.launch.remote_agent" in argv and host.encode() in argv:
            found.append(pid)
    return found


def test_an_mpi_job_across_two_addresses_runs_through_the_agent(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Open MPI's daemons will not wire up over loopback alone (a network namespace or a
    # container with no network of its own), though both hosts' addresses are on it.
    links = [name for _index, name in socket.if_nameindex() if name != "lo"]
    require(None if links else "Open MPI needs a network interface besides loopback")
    shutil.copy(EXAMPLES / "mpi_hello.py", tmp_path / "src" / "train.py")
    env = {variables.JOB_ID: cluster.job_id, variables.AGENT_KEY: TOKEN}
    master = start_runtime(cluster.bases["algo-1"], RUNYARD_HOST="algo-1", **env)
    # algo-2 starts only once mpirun is already calling on it: the client waits for it.
    _wait_until(
        lambda: bool(_agent_calls(cluster.job_id, "algo-2")) or master.poll() is not None,
        timeout=30,
        what="mpirun on algo-1 calls the launch agent for algo-2",
    )
    worker = start_runtime(cluster.bases["algo-2"], RUNYARD_HOST="algo-2", **env)
    outputs = {}
    for host, process in (("algo-1", master), ("algo-2", worker)):
        with process:
            outputs[host] = process.communicate(timeout=60)[0]
    assert master.returncode == 0, outputs
    assert worker.returncode == 0, outputs
    reports = [
        json.loads(line.split("mpi ", 1)[1])
        for line in outputs["algo-1"].splitlines()
        if "mpi {" in line
    ]
    assert {r["rank"]: r["instance"] for r in reports} == {0: "algo-1", 1: "algo-2"}
    assert {r["sum"] for r in reports} == {3}
    assert "Launch agent listening on 127.0.0.2:" in outputs["algo-2"]
    assert "Launch agent: running a command for 127.0.0." in outputs["algo-2"]
    assert "MPI daemon ended" in outputs["algo-2"]
    _wait_until(
        lambda: not procfs.marked_processes(cluster.job_id),
        timeout=5,
        what="no process of the job is left",
    )


def test_an_instance_without_the_agent_key_fails_with_a_reason(
    cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "src" / "train.py").write_text("print('never run here')\n")
    base = cluster.bases["algo-2"]
    process = start_runtime(base, RUNYARD_HOST="algo-2", RUNYARD_JOB_ID=cluster.job_id)
    with process:
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    assert (base / "output" / "failure").read_text() == (
        "InternalServerError: RUNYARD_AGENT_KEY is not set: the launch agent cannot authenticate"
    )
