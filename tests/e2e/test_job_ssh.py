"""SSH between a job's own instances, as SageMaker's containers have it: a script does what
the SageMaker SDK's MPI driver does (appends its environment to /etc/environment, starts
``/usr/sbin/sshd -D``, waits for the other host with paramiko, reaches it with ``ssh``,
then runs ``mpirun --host algo-1,algo-2`` over ssh), with the job's own keys; nothing of
it is left once the job ends, the machine's own SSH is untouched, and a login with
another key, or from another job's instance, is refused.

Through the real service, worker and local backend with namespaces (root, util-linux,
iproute2) and Debian's openssh-server, which ``.ci/run`` installs."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from contract import ssh
from provisioning.local import processes
from runtime.linux.confine import JOB_UID_BASE, job_uid
from runyard.client import Client
from tests.e2e.conftest import Stack
from tests.e2e.test_instances_as_hosts import _network_left, _reports

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not os.access(ssh.SSHD, os.X_OK),
        reason=f"{ssh.SSHD} is missing: apt-get install openssh-server (.ci/run does)",
    ),
]

# What the SageMaker SDK's MPI driver (sagemaker.modules' mpi_driver.py and mpi_utils.py)
# does on each instance, and what each instance saw of it.
DRIVER = """
import json, os, subprocess, sys, time
import paramiko

me = os.environ["SM_CURRENT_HOST"]
hosts = json.loads(os.environ["SM_HOSTS"])
peer = next(host for host in hosts if host != me)
interface = os.environ["SM_NETWORK_INTERFACE_NAME"]
report = {"host": me}


def wait(what, check, seconds=120):
    deadline = time.monotonic() + seconds
    while not (found := check()):
        if time.monotonic() > deadline:
            print(f"gave up waiting for {what}: {report}", flush=True)
            sys.exit(3)
        time.sleep(0.5)
    return found


def login(host):
    # As the driver's _can_connect, but with no policy of its own: the job's known hosts
    # must know the host, or the login is refused.
    try:
        with paramiko.SSHClient() as client:
            client.load_system_host_keys()
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            client.connect(host, port=22, timeout=5)
            _, out, _ = client.exec_command("id -un; hostname")
            return out.read().decode().split()
    except Exception as error:
        report.setdefault("paramiko_errors", []).append(f"{type(error).__name__}: {error}")
        return None


with open("/etc/environment", "a") as environment:
    for name in os.environ:
        environment.write(f"{name}={os.environ[name]}\\n")
subprocess.Popen(["/usr/sbin/sshd", "-D"])
report["paramiko"] = wait(f"{peer}'s sshd", lambda: login(peer))
report.pop("paramiko_errors", None)  # those of the tries before the peer's sshd was up
touched = subprocess.run(["ssh", peer, "touch", f"/tmp/ready.{me}"], capture_output=True, text=True)
report["ssh"] = [touched.returncode, touched.stderr.strip()]
wait(f"{peer}'s ssh", lambda: os.path.exists(f"/tmp/ready.{peer}"))
if me == hosts[0]:
    mpirun = [
        "mpirun", "--host", ",".join(hosts), "-np", str(len(hosts)), "--tag-output",
        "-mca", "btl_tcp_if_include", interface, "-mca", "oob_tcp_if_include", interface,
        "-mca", "plm_rsh_no_tree_spawn", "1", "-mca", "pml", "ob1",
        "-x", "PATH", sys.executable, "-m", "mpi4py", "rank.py",
    ]
    report["mpirun"] = subprocess.run(mpirun, timeout=240).returncode
    done = subprocess.run(["ssh", peer, "touch", "/tmp/done.algo-1"], capture_output=True)
    report["done"] = done.returncode
else:
    wait("algo-1's mpirun", lambda: os.path.exists("/tmp/done.algo-1"), seconds=300)
report["whoami"] = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
report["host_key"] = open("/etc/ssh/ssh_host_ed25519_key.pub").read().split()[1]
print("ssh " + json.dumps(report), flush=True)
"""

# Each rank: where it runs, and what its login on that host started it with.
RANK = """
import json, os, socket
from mpi4py import MPI

world = MPI.COMM_WORLD
total = world.allreduce(world.rank + 1)
print("rank " + json.dumps({
    "rank": world.rank, "size": world.size, "sum": total, "hostname": socket.gethostname(),
    # Not forwarded by mpirun: on algo-2, what algo-2's driver left in /etc/environment.
    "sm_current_host": os.environ.get("SM_CURRENT_HOST"),
}), flush=True)
"""

# Serves SSH on its one instance until the test is done with it, and tries a login with
# the job's key and with a key of its own making.
GUARD = """
import json, os, subprocess, time
import paramiko


def login(**how):
    try:
        with paramiko.SSHClient() as client:
            client.load_system_host_keys()
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            client.connect("algo-1", port=22, timeout=5, **how)
            return "logged in"
    except paramiko.AuthenticationException:
        return "refused"
    except Exception as error:
        return type(error).__name__


subprocess.Popen(["/usr/sbin/sshd", "-D"])
deadline = time.monotonic() + 60
while (job_key := login()) != "logged in" and time.monotonic() < deadline:
    time.sleep(0.5)
other = paramiko.RSAKey.generate(2048)
report = {
    "job_key": job_key,
    "other_key": login(pkey=other, look_for_keys=False, allow_agent=False),
}
print("guard " + json.dumps(report), flush=True)
deadline = time.monotonic() + 240
while not os.path.exists("/opt/ml/done") and time.monotonic() < deadline:
    time.sleep(0.2)
"""

# Another job's instance tries the guard's sshd at its address.
INTRUDER = """
import errno, json, os, socket
import paramiko

address = os.environ["GUARDED"]
report = {}
try:
    socket.create_connection((address, 22), timeout=10).close()
    report["tcp"] = "connected"
except OSError as error:
    report["tcp"] = errno.errorcode.get(error.errno or 0, type(error).__name__)
try:
    with paramiko.SSHClient() as client:
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        client.connect(address, port=22, timeout=10)
        report["login"] = "logged in"
except Exception as error:
    report["login"] = type(error).__name__
print("intruder " + json.dumps(report), flush=True)
"""


def _source(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    source = tmp_path / name
    source.mkdir()
    for file_name, text in files.items():
        (source / file_name).write_text(textwrap.dedent(text))
    return source


def _lines(client: Client, name: str) -> list[str]:
    return [str(event["message"]) for event in client.logs(name) if "message" in event]


def _sshd_processes() -> dict[int, int]:
    """Every sshd on the machine: its pid and its user."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "exe") != ssh.SSHD:
                continue
            found[int(entry.name)] = entry.stat().st_uid
        except OSError:
            continue
    return found


def _processes_of(uid: int) -> list[int]:
    """Every process of the user ``uid`` on the machine (an sshd, a login's shell, ...)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _machine_ssh() -> dict[str, str]:
    """What the machine's own SSH is made of: /etc/environment, /etc/ssh's files."""
    seen = {"/etc/environment": Path("/etc/environment").read_text()}
    for path in sorted(Path("/etc/ssh").glob("*")):
        if path.is_file():
            seen[str(path)] = path.read_text(errors="replace")
    return seen


def _ended(stack: Stack, client: Client, job: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    job = stack.wait_until_ended(client, job["name"], timeout=300)
    lines = _lines(client, job["name"])
    assert job["status"] == "Completed", stack.explain(job, list(client.logs(job["name"])))
    assert processes.marked_processes(job["id"]) == []
    assert _network_left(job["id"]) == []
    return job, lines


def test_a_jobs_instances_reach_each_other_over_ssh_as_sagemakers_mpi_driver_does(
    stack: Stack, tmp_path: Path
) -> None:
    machine_before, sshd_before = _machine_ssh(), _sshd_processes()
    with stack.client() as client:
        job = stack.submit(
            client,
            _source(tmp_path, "driver", {"train.py": DRIVER, "rank.py": RANK}),
            entry_point="train.py",
            instance_count=2,
        )
        job, lines = _ended(stack, client, job)
    assert job["isolation"] == "namespaces"
    reports = {report["host"]: report for report in _reports(lines, "ssh")}
    assert sorted(reports) == ["algo-1", "algo-2"], lines[-40:]
    for host, peer in (("algo-1", "algo-2"), ("algo-2", "algo-1")):
        report = reports[host]
        # paramiko, refusing any host it does not know, logged in to the peer as the
        # job's user; ssh touched a file there without a question.
        assert report["paramiko"] == ["job", peer], report
        assert report["ssh"] == [0, ""], report
        assert report["whoami"] == "job"
    assert reports["algo-1"]["mpirun"] == 0
    assert reports["algo-1"]["done"] == 0
    ranks = sorted(_reports(lines, "rank"), key=lambda report: report["rank"])
    assert ranks == [
        {"rank": 0, "size": 2, "sum": 3, "hostname": "algo-1", "sm_current_host": "algo-1"},
        {"rank": 1, "size": 2, "sum": 3, "hostname": "algo-2", "sm_current_host": "algo-2"},
    ]
    # Host keys of the job's own, one per instance, never the machine's.
    keys = {report["host_key"] for report in reports.values()}
    assert len(keys) == 2
    machine_keys = {
        text.split()[1] for path, text in machine_before.items() if path.endswith(".pub")
    }
    assert not keys & machine_keys
    # Nothing is left: no daemon of the job's user, the machine's SSH as it was, and the
    # machine's own sshd neither started nor stopped.
    uid = job_uid(job["id"])
    assert uid >= JOB_UID_BASE
    assert _processes_of(uid) == []
    assert _machine_ssh() == machine_before
    assert {pid: owner for pid, owner in _sshd_processes().items() if owner < JOB_UID_BASE} == {
        pid: owner for pid, owner in sshd_before.items() if owner < JOB_UID_BASE
    }


def test_a_login_needs_the_jobs_key_and_another_jobs_instance_gets_none(
    stack: Stack, tmp_path: Path
) -> None:
    with stack.client() as client:
        guard = stack.submit(
            client, _source(tmp_path, "guard", {"train.py": GUARD}), entry_point="train.py"
        )
        stack.wait_for(
            client,
            guard["name"],
            lambda _job: bool(_reports(_lines(client, guard["name"]), "guard")),
        )
        plan = json.loads((stack.home / "jobs" / guard["id"] / "plan.json").read_text())
        address = plan["network"]["ports"][0]["address"]
        intruder = stack.submit(
            client,
            _source(tmp_path, "intruder", {"train.py": INTRUDER}),
            entry_point="train.py",
            environment={"GUARDED": address},
        )
        _, intruder_lines = _ended(stack, client, intruder)
        (stack.home / "jobs" / guard["id"] / "algo-1" / "done").touch()
        _, guard_lines = _ended(stack, client, guard)
    [guarded] = _reports(guard_lines, "guard")
    assert guarded == {"job_key": "logged in", "other_key": "refused"}
    [tried] = _reports(intruder_lines, "intruder")
    # The network turns it away before any key is asked for.
    assert tried["tcp"] in ("EHOSTUNREACH", "ENETUNREACH", "ECONNREFUSED"), tried
    assert tried["login"] != "logged in", tried
    assert _processes_of(job_uid(guard["id"])) == []


def test_an_instance_has_an_etc_environment_and_a_user_of_its_own(
    stack: Stack, tmp_path: Path
) -> None:
    """/etc/environment and the job's user in /etc/passwd are the instance's: the script
    writes the one and finds the other, and the machine's files never change."""
    before = Path("/etc/environment").read_text()
    script = (
        "import os, pwd\n"
        "open('/etc/environment', 'a').write('ADDED=1\\n')\n"
        "print('environment ' + repr(open('/etc/environment').read().splitlines()[-1]))\n"
        "print('user ' + pwd.getpwuid(os.getuid()).pw_name + ' ' + os.environ['HOME'])\n"
        "print('home ' + pwd.getpwuid(os.getuid()).pw_dir)\n"
    )
    with stack.client() as client:
        job = stack.submit(
            client, _source(tmp_path, "environment", {"train.py": script}), entry_point="train.py"
        )
        _, lines = _ended(stack, client, job)
    assert "environment 'ADDED=1'" in lines
    assert "user job /opt/ml/.runyard/home" in lines
    assert "home /opt/ml/.runyard/home" in lines
    assert Path("/etc/environment").read_text() == before
    assert subprocess.run(["id", "job"], capture_output=True).returncode != 0  # not the machine's
