"""Local instances that look like SageMaker's: each a host of its own (Linux namespaces),
and, where namespaces cannot be used, instances that share the machine and say so.

Through the real service, worker and local backend; each script reports what it observed
from inside its instance, and nothing of a job (processes, namespaces, bridge) is left.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioning.local import egress, network, processes
from runtime.linux.confine import JOB_UID_BASE
from runyard.client import Client
from runyard.output import describe_lines
from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

PROBE = """
import json, os, socket, sys, time

hosts = json.loads(os.environ["SM_HOSTS"])
me = os.environ["SM_CURRENT_HOST"]
report = {
    "hostname": socket.gethostname(),
    "resolved": {host: socket.gethostbyname(host) for host in hosts},
    "hyperparameters": json.load(open("/opt/ml/input/config/hyperparameters.json")),
    "sm_model_dir": os.environ["SM_MODEL_DIR"],
    "sagemaker_base_dir": os.environ["SAGEMAKER_BASE_DIR"],
}
# Which instances' processes this one can see: the host each visible process belongs to.
seen = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
    except OSError:
        continue
    seen |= {entry.split(b"=", 1)[1].decode() for entry in environ
             if entry.startswith(b"RUNYARD_HOST=")}
report["instances_seen"] = sorted(seen)
# algo-1 serves, algo-2 calls it by name: each its own address on the job's network.
if me == "algo-1":
    server = socket.create_server(("", 5555))
    server.settimeout(60)
    connection, peer = server.accept()
    report["heard"] = connection.recv(100).decode()
    report["peer"] = peer[0]
    # Nor can it signal them: the pids the machine knows algo-2's processes by, which the
    # test leaves here while algo-2 waits on this connection, name no process of its own.
    for _ in range(1200):
        if os.path.exists("/opt/ml/algo-2-pids.json"):
            break
        time.sleep(0.1)
    own = set(filter(str.isdigit, os.listdir("/proc")))
    signalled = {}
    for pid in json.load(open("/opt/ml/algo-2-pids.json")):
        if str(pid) in own:
            continue  # the same number, by chance, as one of this instance's processes
        try:
            os.kill(pid, 0)
            signalled[pid] = "reached"
        except OSError as error:
            signalled[pid] = type(error).__name__
    report["signalled"] = signalled
    connection.sendall(b"done")
    connection.close()
else:
    for _ in range(300):
        try:
            with socket.create_connection(("algo-1", 5555), timeout=2) as sock:
                sock.sendall(f"hello from {socket.gethostname()}".encode())
                sock.settimeout(180)
                sock.recv(100)  # alive until algo-1 has tried to signal it
            break
        except OSError:
            time.sleep(0.1)
with open("/opt/ml/model/written-at-opt-ml.txt", "w") as handle:
    handle.write(me)
print("probe " + json.dumps(report, sort_keys=True), flush=True)
"""

# The oldest SageMaker PyTorch pattern: no distribution; the script makes the first host
# its master by name and takes its rank from its host's index.
LEGACY_DDP = """
import json, os, torch, torch.distributed as dist

hosts = json.loads(os.environ["SM_HOSTS"])
os.environ["MASTER_ADDR"] = hosts[0]
os.environ["MASTER_PORT"] = "29501"
rank = hosts.index(os.environ["SM_CURRENT_HOST"])
dist.init_process_group("gloo", rank=rank, world_size=len(hosts))
value = torch.tensor([rank + 1.0])
dist.all_reduce(value)
print("legacy " + json.dumps({"rank": rank, "sum": value.item()}), flush=True)
dist.destroy_process_group()
"""

# The pattern SageMaker's PyTorch container serves: no rendezvous of the script's own, the
# container's MASTER_ADDR and MASTER_PORT (algo-1's host name, as it sets them).
CONTAINER_RENDEZVOUS = """
import json, os, socket, torch, torch.distributed as dist

hosts = json.loads(os.environ["SM_HOSTS"])
rank = hosts.index(os.environ["SM_CURRENT_HOST"])
dist.init_process_group("gloo", rank=rank, world_size=len(hosts))
value = torch.tensor([rank + 1.0])
dist.all_reduce(value)
master = os.environ["MASTER_ADDR"]
print("master " + json.dumps({"rank": rank, "master_addr": master, "sum": value.item(),
                              "resolved": socket.gethostbyname(master)}), flush=True)
dist.destroy_process_group()
"""

# Each instance names its peer's address as IPv4 and dual-stack IPv6 sockets see it, as
# torch.distributed's store names each connection, then joins a gloo process group.
TORCH_NAMES = """
import json, os, socket, torch, torch.distributed as dist

hosts = json.loads(os.environ["SM_HOSTS"])
peer = next(host for host in hosts if host != os.environ["SM_CURRENT_HOST"])
address = socket.gethostbyname(peer)

def ask(call):
    try:
        return call()
    except OSError as error:
        return f"{type(error).__name__}: {error}"

names = {
    "peer": peer,
    "by_address": ask(lambda: socket.gethostbyaddr(address)[0]),
    "name_info": ask(lambda: socket.getnameinfo((address, 7777), 0)[0]),
    "mapped_name_info": ask(lambda: socket.getnameinfo((f"::ffff:{address}", 7777), 0)[0]),
}
dist.init_process_group("gloo")
value = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(value)
names["sum"] = value.item()
print("names " + json.dumps(names), flush=True)
dist.destroy_process_group()
"""

MPI_COLLECTIVES = """
import json, socket
from mpi4py import MPI

world = MPI.COMM_WORLD
greeting = world.bcast({"from": socket.gethostname()} if world.rank == 0 else None, root=0)
total = world.allreduce(world.rank + 1)
gathered = world.allgather(socket.gethostname())
world.Barrier()
print("mpi " + json.dumps({
    "rank": world.rank, "size": world.size, "sum": total, "greeting": greeting,
    "hostname": socket.gethostname(), "gathered": gathered,
    "resolved": {host: socket.gethostbyname(host) for host in ("algo-1", "algo-2")}
    if socket.gethostname().startswith("algo-") else {},
}), flush=True)
"""


def _source(tmp_path: Path, name: str, script: str) -> Path:
    source = tmp_path / name
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(script))
    return source


def _reports(lines: list[str], tag: str) -> list[dict[str, Any]]:
    found = []
    for line in lines:
        untagged = re.sub(r"^\[\d+,\d+\]<std(?:out|err)>:\s?", "", line)
        if untagged.startswith(f"{tag} "):
            found.append(json.loads(untagged.removeprefix(f"{tag} ")))
    return found


def _network_left(job_id: str) -> list[str]:
    """Whatever of the job's private network still exists, its rules included."""
    left = [path.name for path in network.NETNS_DIR.glob(f"runyard-{job_id}-*")]
    left += [f"table runyard-{held}" for held in egress.held_tables() if held == job_id]
    bridge = network.plan(job_id, []).bridge
    shown = subprocess.run(["ip", "link", "show", bridge], capture_output=True, check=False)
    return [*left, bridge] if shown.returncode == 0 else left


def _run(
    stack: Stack,
    client: Client,
    source: Path,
    during: Callable[[dict[str, Any]], None] | None = None,
    **spec: Any,
) -> tuple[dict[str, Any], list[str]]:
    job = stack.submit(client, source, entry_point="train.py", instance_count=2, **spec)
    if during is not None:
        during(job)
    job = stack.wait_until_ended(client, job["name"], timeout=180)
    events = list(client.logs(job["name"]))
    assert job["status"] == "Completed", stack.explain(job, events)
    assert processes.marked_processes(job["id"]) == []
    assert _network_left(job["id"]) == []
    return job, [event["message"] for event in events]


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A server whose operator turned namespaces off."""
    home = tmp_path_factory.mktemp("runyard-shared")
    running = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'b.db'}")
    running.env["RUNYARD_LOCAL_ISOLATION"] = "shared"
    yield running.up()
    assert running.down() == []


def _give_algo_1_the_pids_of_algo_2(stack: Stack) -> Callable[[dict[str, Any]], None]:
    """Once algo-2's script runs, the machine's pids of algo-2's processes, left in algo-1's
    directory for its probe, which reports whether it could signal them."""

    def give(job: dict[str, Any]) -> None:
        deadline = time.monotonic() + 120
        while not (pids := _script_and_runtime(job["id"], "algo-2")):
            assert time.monotonic() < deadline, "algo-2's script never started"
            time.sleep(0.1)
        given = stack.home / "jobs" / job["id"] / "algo-1" / "algo-2-pids.json"
        given.with_suffix(".part").write_text(json.dumps(pids))
        given.with_suffix(".part").rename(given)

    return give


def _script_and_runtime(job_id: str, host: str) -> list[int]:
    """The pids of ``host``'s processes once its script is among them, else none."""
    pids = processes.marked_processes(job_id, host)
    commands = []
    for pid in pids:
        try:
            commands.append(Path(f"/proc/{pid}/cmdline").read_bytes())
        except OSError:
            commands.append(b"")
    return pids if any(b"train.py" in command for command in commands) else []


def test_each_instance_is_a_host_of_its_own(stack: Stack, tmp_path: Path) -> None:
    with stack.client() as client:
        job, lines = _run(
            stack,
            client,
            _source(tmp_path, "probe", PROBE),
            during=_give_algo_1_the_pids_of_algo_2(stack),
            hyperparameters={"epochs": 3},
        )
    reports = {report["hostname"]: report for report in _reports(lines, "probe")}
    assert sorted(reports) == ["algo-1", "algo-2"]
    addresses = reports["algo-1"]["resolved"]
    # Every name resolves from every instance, to an address of the instance's own.
    assert reports["algo-2"]["resolved"] == addresses
    assert len(set(addresses.values())) == 2
    assert not any(address.startswith("127.") for address in addresses.values())
    # algo-2 reached algo-1 by name, from its own address.
    assert reports["algo-1"]["heard"] == "hello from algo-2"
    assert reports["algo-1"]["peer"] == addresses["algo-2"]
    for host, report in reports.items():
        assert report["hyperparameters"] == {"epochs": "3"}  # read at the /opt/ml path
        assert report["sm_model_dir"] == "/opt/ml/model"
        assert report["sagemaker_base_dir"] == "/opt/ml"
        assert report["instances_seen"] == [host]  # no process of the other instance
    # Nor can one signal the other's: its pids, as the machine knows them, name nothing.
    signalled = reports["algo-1"]["signalled"]
    assert signalled, "algo-1 tried none of algo-2's pids"
    assert set(signalled.values()) == {"ProcessLookupError"}, signalled
    assert job["isolation"] == "namespaces"
    assert "Instances:        2 x local on local (namespaces)" in describe_lines(job)
    assert job["model_artifacts"]  # algo-1's model dir, written through /opt/ml


def test_the_oldest_sagemaker_pytorch_pattern_finds_its_master_by_name(
    stack: Stack, tmp_path: Path
) -> None:
    with stack.client() as client:
        _, lines = _run(stack, client, _source(tmp_path, "legacy", LEGACY_DDP))
    reports = _reports(lines, "legacy")
    assert sorted(report["rank"] for report in reports) == [0, 1]
    assert {report["sum"] for report in reports} == {3.0}


@pytest.mark.parametrize("isolation", ["namespaces", "shared"])
def test_master_addr_is_algo_1_by_name_where_names_resolve(
    isolation: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    stack: Stack = request.getfixturevalue("stack" if isolation == "namespaces" else "shared_stack")
    with stack.client() as client:
        _, lines = _run(stack, client, _source(tmp_path, "master", CONTAINER_RENDEZVOUS))
    reports = sorted(_reports(lines, "master"), key=lambda report: report["rank"])
    assert [(report["rank"], report["sum"]) for report in reports] == [(0, 3.0), (1, 3.0)]
    # Each instance's own /etc/hosts names algo-1; instances that share the machine share
    # its /etc/hosts too, which names no algo-N: algo-1's address (loopback) stands in.
    expected = "algo-1" if isolation == "namespaces" else "127.0.0.1"
    assert {report["master_addr"] for report in reports} == {expected}
    assert reports[0]["resolved"] == reports[1]["resolved"]


def test_addresses_resolve_to_host_names_inside_instances(stack: Stack, tmp_path: Path) -> None:
    with stack.client() as client:
        _, lines = _run(
            stack,
            client,
            _source(tmp_path, "names", TORCH_NAMES),
            distribution={"torch_distributed": {"enabled": True}},
        )
    reports = sorted(_reports(lines, "names"), key=lambda report: report["peer"])
    assert [report["peer"] for report in reports] == ["algo-1", "algo-2"]
    for report in reports:
        peer = report["peer"]
        assert report == {
            "peer": peer,
            "by_address": peer,
            "name_info": peer,
            # What a dual-stack socket sees: named after the host, not as it (etc_hosts).
            "mapped_name_info": f"{peer}.ipv4-mapped",
            "sum": 3.0,
        }
    # torch's store names every connection it makes and takes: without a name for each
    # address, each instance's log says so.
    assert not [line for line in lines if "hostname of the client socket" in line]


@pytest.mark.parametrize("isolation", ["namespaces", "shared"])
def test_mpi_at_its_defaults_runs_collectives_with_one_process_per_instance(
    isolation: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    stack: Stack = request.getfixturevalue("stack" if isolation == "namespaces" else "shared_stack")
    with stack.client() as client:
        job, lines = _run(
            stack,
            client,
            _source(tmp_path, "mpi", MPI_COLLECTIVES),
            distribution={"mpi": {"enabled": True}},
        )
    reports = sorted(_reports(lines, "mpi"), key=lambda report: report["rank"])
    assert [report["rank"] for report in reports] == [0, 1]
    assert {report["sum"] for report in reports} == {3}
    assert job["isolation"] == isolation
    if isolation == "namespaces":
        # The ranks mpirun started are on their instances, under their SageMaker names.
        assert [report["hostname"] for report in reports] == ["algo-1", "algo-2"]
        assert reports[1]["gathered"] == ["algo-1", "algo-2"]
        assert reports[1]["greeting"] == {"from": "algo-1"}
        assert reports[0]["resolved"] == reports[1]["resolved"]


def test_instances_that_share_the_machine_say_so_once(shared_stack: Stack, tmp_path: Path) -> None:
    with shared_stack.client() as client:
        job, lines = _run(shared_stack, client, _source(tmp_path, "plain", "print('hi')\n"))
    notices = [line for line in lines if "share this machine's host name and network" in line]
    assert len(notices) == 1
    assert "RUNYARD_LOCAL_ISOLATION is shared" in notices[0]
    assert job["isolation"] == "shared"


def test_without_the_tools_instances_share_the_machine_and_say_why(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    home = tmp_path_factory.mktemp("runyard-no-tools")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'b.db'}")
    # A machine without util-linux's unshare or iproute2's ip on the worker's PATH.
    stack.env["PATH"] = str(Path(sys.executable).parent)
    try:
        stack.up()
        with stack.client() as client:
            job, lines = _run(stack, client, _source(tmp_path, "plain", "print('hi')\n"))
    finally:
        assert stack.down() == []
    assert job["isolation"] == "shared"
    [notice] = [line for line in lines if "share this machine's host name" in line]
    assert "not found on PATH" in notice


SANDBOX = """
import json, os, subprocess

home = json.load(open("/opt/ml/input/config/hyperparameters.json"))["home"]


def attempt(call):
    try:
        return call()
    except OSError as exc:
        return type(exc).__name__


report = {
    "uid": os.getuid(),
    "token": attempt(lambda: open(os.path.join(home, "token")).read()),
    "home": attempt(lambda: sorted(os.listdir(home))),
    "jobs": attempt(lambda: sorted(os.listdir(os.path.join(home, "jobs")))),
    "runtime_environ": attempt(lambda: len(open("/proc/1/environ", "rb").read())),
    "unmount": subprocess.run(["umount", home], capture_output=True).returncode,
    "model": attempt(lambda: open("/opt/ml/model/model.txt", "w").write("weights")),
    "tmp": attempt(lambda: open("/tmp/scratch.txt", "w").write("scratch")),
    "own_home": attempt(lambda: open(os.path.expanduser("~/.cache-probe"), "w").write("c")),
}
print("sandbox", json.dumps(report), flush=True)
"""


def test_a_jobs_processes_see_nothing_of_the_server(stack: Stack, tmp_path: Path) -> None:
    """A member's script looks for the server's home (the administrator's token, the
    database, other jobs) and its runtime's environment: it runs as the job's own user,
    and finds only what its instance is given."""
    with stack.client() as client:
        _, lines = _run(
            stack,
            client,
            _source(tmp_path, "sandbox", SANDBOX),
            hyperparameters={"home": str(stack.home)},
        )
    [first, second] = _reports(lines, "sandbox")
    assert first["uid"] == second["uid"] >= JOB_UID_BASE
    for report in (first, second):
        assert report["token"] == "FileNotFoundError"
        # At most what its instances run from (the image store, the job's own layer),
        # where those exist; here (the built-in image, no requirements) nothing at all.
        assert report["home"] == report["jobs"] == "FileNotFoundError", report
        assert report["runtime_environ"] == "PermissionError"
        assert report["unmount"] != 0
        assert report["model"] == len("weights")
        assert report["tmp"] == len("scratch")
        assert report["own_home"] == 1
    assert (stack.home / "token").exists()


# The code as a package: its build (setup.py, run by pip when the runtime installs the
# code) looks for the server's home, then leaves what it found in a module of the package.
BUILD_PROBE = """
import json, os
from setuptools import setup

home = {home!r}


def attempt(call):
    try:
        return call()
    except OSError as exc:
        return type(exc).__name__


found = {{
    "uid": os.getuid(),
    "token": attempt(lambda: open(os.path.join(home, "token")).read()),
    "home": attempt(lambda: sorted(os.listdir(home))),
    "runtime_environ": attempt(lambda: len(open("/proc/1/environ", "rb").read())),
}}
with open("build_probe.py", "w") as module:
    module.write(f"FOUND = {{found!r}}\\n")
setup(name="build-probe", version="1.0", py_modules=["build_probe"])
"""
PRINT_BUILD_PROBE = """
import json, os
import build_probe
print("build", json.dumps({**build_probe.FOUND, "script_uid": os.getuid()}), flush=True)
"""


def test_a_packages_build_runs_as_the_jobs_user_and_sees_nothing_of_the_server(
    stack: Stack, tmp_path: Path
) -> None:
    """The runtime installs the job's packages before its scripts run; a package's build
    (a setup.py, code of the job's) runs as the job's user, confined as its scripts are."""
    source = _source(tmp_path, "package", PRINT_BUILD_PROBE)
    (source / "setup.py").write_text(BUILD_PROBE.format(home=str(stack.home)))
    with stack.client() as client:
        _, lines = _run(stack, client, source)
    assert any(line == "Installing the code as a package" for line in lines), lines
    [first, second] = _reports(lines, "build")
    assert first["uid"] == first["script_uid"] >= JOB_UID_BASE
    assert first == second  # built once, by the first instance, for both
    assert first["token"] == "FileNotFoundError"
    # An empty cover, but for the way to the job's own layer, which the build writes.
    assert first["home"] == ["jobs"]
    assert first["runtime_environ"] == "PermissionError"


PIPE_EPOCHS = """
for epoch in range(3):
    with open(f"/opt/ml/input/data/train_{epoch}", "rb") as fifo:
        print("pipe", epoch, len(fifo.read()), flush=True)
"""


def test_a_pipe_channel_serves_every_epoch_to_the_jobs_user(stack: Stack, tmp_path: Path) -> None:
    """The runtime makes each epoch's FIFO while the script runs, as root; the script, as
    the job's user, opens each of them."""
    data = tmp_path / "train"
    data.mkdir()
    (data / "part-0.bin").write_bytes(b"x" * 1000)
    (data / "part-1.bin").write_bytes(b"y" * 24)
    with stack.client() as client:
        _, lines = _run(
            stack,
            client,
            _source(tmp_path, "pipe", PIPE_EPOCHS),
            inputs={"train": {"uri": data.as_uri(), "input_mode": "Pipe"}},
        )
    read = [line for line in lines if line.startswith("pipe ")]
    assert sorted(read) == sorted([f"pipe {epoch} 1024" for epoch in range(3)] * 2)


WAITS_THEN_SAVES = """
import os, time
base = os.environ["SAGEMAKER_BASE_DIR"]
for _ in range(1200):
    if os.path.exists(os.path.join(base, "go")):
        break
    time.sleep(0.1)
with open(os.path.join(base, "model", "model.txt"), "w") as model:
    model.write("weights")
"""


def test_an_output_path_swapped_for_a_link_after_submission_is_refused(
    stack: Stack, tmp_path: Path
) -> None:
    """The output path was inside the server's file roots when the job was submitted;
    replaced by a link to elsewhere while it runs, the model goes nowhere."""
    output = tmp_path / "output"
    output.mkdir()
    elsewhere = Path(tempfile.mkdtemp(prefix="runyard-elsewhere-"))  # outside every root
    try:
        with stack.client() as client:
            job = stack.submit(
                client,
                _source(tmp_path, "saves", WAITS_THEN_SAVES),
                entry_point="train.py",
                output_path=output.as_uri(),
            )
            stack.wait_for(client, job["name"], lambda j: j["secondary_status"] == "Training")
            output.rename(tmp_path / "moved")
            output.symlink_to(elsewhere)
            (stack.home / "jobs" / job["id"] / "algo-1" / "go").touch()
            job = stack.wait_until_ended(client, job["name"], timeout=180)
        assert job["status"] == "Failed"
        assert job["failure_reason"].startswith("UploadError: could not store the model: ")
        assert "refused" in job["failure_reason"]
        assert list(elsewhere.iterdir()) == []
    finally:
        shutil.rmtree(elsewhere)
