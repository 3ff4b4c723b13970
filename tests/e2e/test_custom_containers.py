"""Custom containers on the local backend: a job whose image_uri names an OCI image runs each
instance in a container of it, with SageMaker's bring-your-own-container contract, through
the real service, worker, runtime and podman, with images made here (tests.container_images).

Nothing of a job may be left: no process (the stack checks), no container.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from contract import storage
from contract.containers import LABEL_JOB_ID
from contract.hosts import host_number
from provisioning.local.addresses import DEFAULT_POOL, SUBNET_PREFIX
from runyard.client import Client, RunyardError
from tests.container_images import image
from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

JOB_TIMEOUT = 240


@pytest.fixture(scope="module")
def plain() -> str:
    return image("plain")


def _containers_of(job_id: str) -> list[str]:
    listed = subprocess.run(
        ["podman", "ps", "--all", "--quiet", "--filter", f"label={LABEL_JOB_ID}={job_id}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def _seen(client: Client, name: str) -> dict[str, Any]:
    return {
        event["host"]: json.loads(event["message"].removeprefix("container "))
        for event in client.logs(name)
        if str(event.get("message", "")).startswith("container ")
    }


def _on_one_subnet(addresses: dict[str, str]) -> dict[str, str]:
    """What a job's hosts should resolve to: algo-N at .N+1 of one /24 of the pool, the
    job's own (each job with a way out has another)."""
    subnet = ipaddress.ip_network(f"{addresses['algo-1']}/{SUBNET_PREFIX}", strict=False)
    assert subnet.subnet_of(DEFAULT_POOL), addresses
    return {host: str(subnet.network_address + host_number(host) + 1) for host in addresses}


def _create(client: Client, **spec: Any) -> dict[str, Any]:
    return client.create_job({"instance_type": "local", **spec})


def test_a_container_runs_train_with_sagemakers_contract_on_the_jobs_network(
    stack: Stack, plain: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    with stack.client() as client:
        job = _create(
            client,
            name="byoc",
            image_uri=plain,
            instance_count=2,
            hyperparameters={"epochs": 3},
            environment={"MY_SETTING": "on"},
            inputs={"train": data.as_uri()},
        )
        job = stack.wait_until_ended(client, "byoc", timeout=JOB_TIMEOUT)
        events = list(client.logs("byoc"))
        assert job["status"] == "Completed", stack.explain(job, events)
        seen = _seen(client, "byoc")
    assert (job["image"], job["isolation"]) == (plain, "container")
    addresses = _on_one_subnet(seen["algo-1"]["resolved"])
    for host in ("algo-1", "algo-2"):
        assert seen[host] == {
            "hostname": host,
            "resolved": addresses,
            "hyperparameters": {"epochs": "3"},
            # The job's own variables and SageMaker's, never the runtime's or the server's.
            "environment": {
                "MY_SETTING": "on",
                "SM_CURRENT_HOST": host,
                "SM_MODEL_DIR": "/opt/ml/model",
                "TRAINING_JOB_NAME": "byoc",
                "PATH": "/usr/local/bin:/usr/bin:/bin",
            },
            "files": ["part-0.csv"],
        }
    # What the first instance's container left in /opt/ml/model is the job's model.
    model = storage.local_path(job["model_artifacts"])
    with tarfile.open(model) as archive:
        assert archive.getnames() == ["algo-1.txt"]
    assert _containers_of(job["id"]) == []


# Each container names its peer's address, its IPv4-mapped form (what a dual-stack socket
# sees of an IPv4 peer) and loopback's: from its /etc/hosts, with no DNS server in reach.
NAMES = """
import json, socket
resources = json.load(open("/opt/ml/input/config/resourceconfig.json"))
peer = next(h for h in resources["hosts"] if h != resources["current_host"])
address = socket.gethostbyname(peer)
named = {}
for asked in (address, f"::ffff:{address}", "127.0.0.1", "::ffff:127.0.0.1", "::1"):
    try:
        named[asked] = socket.getnameinfo((asked, 7777), 0)[0]
    except OSError as error:
        named[asked] = str(error)
print("names " + json.dumps({"peer": peer, "address": address, "named": named}), flush=True)
"""


def test_every_address_a_container_meets_resolves_to_a_name(
    stack: Stack, plain: str, tmp_path: Path
) -> None:
    (tmp_path / "names.py").write_text(NAMES)
    with stack.client() as client:
        job = _create(
            client,
            name="byoc-names",
            image_uri=plain,
            instance_count=2,
            entry_point="names.py",
            source_uri=client.upload_source(tmp_path),
            container_entrypoint=["python3", "/opt/ml/code/names.py"],
        )
        job = stack.wait_until_ended(client, "byoc-names", timeout=JOB_TIMEOUT)
        events = list(client.logs("byoc-names"))
    assert job["status"] == "Completed", stack.explain(job, events)
    said = [str(e["message"]) for e in events if str(e.get("message", "")).startswith("names ")]
    reports = sorted(
        (json.loads(line.removeprefix("names ")) for line in said), key=lambda r: r["peer"]
    )
    addresses = _on_one_subnet({report["peer"]: report["address"] for report in reports})
    assert [(report["peer"], report["address"]) for report in reports] == list(addresses.items())
    for report in reports:
        peer, address = report["peer"], report["address"]
        assert report["named"] == {
            address: peer,
            f"::ffff:{address}": f"{peer}.ipv4-mapped",
            "127.0.0.1": "localhost",
            "::ffff:127.0.0.1": "localhost.ipv4-mapped",
            "::1": "localhost",
        }
    assert _containers_of(job["id"]) == []


def test_sagemaker_program_runs_through_the_training_toolkit_in_the_image(
    stack: Stack, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        textwrap.dedent(
            """\
            import json, os, sys
            print("script " + json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(),
                                          "hosts": json.loads(os.environ["SM_HOSTS"])}))
            """
        )
    )
    toolkit = image("toolkit")
    with stack.client() as client:
        job = _create(
            client,
            name="byoc-toolkit",
            image_uri=toolkit,
            entry_point="train.py",
            source_uri=client.upload_source(source),
            hyperparameters={"epochs": 2},
        )
        job = stack.wait_until_ended(client, "byoc-toolkit", timeout=JOB_TIMEOUT)
        events = list(client.logs("byoc-toolkit"))
    assert job["status"] == "Completed", stack.explain(job, events)
    (said,) = [e["message"] for e in events if str(e.get("message", "")).startswith("script ")]
    assert json.loads(said.removeprefix("script ")) == {
        "argv": ["--epochs", "2"],
        "cwd": "/opt/ml/code",
        "hosts": ["algo-1"],
    }


def test_a_failing_container_fails_the_job_with_its_own_reason(stack: Stack, plain: str) -> None:
    with stack.client() as client:
        _create(client, name="byoc-fails", image_uri=plain, hyperparameters={"fail": True})
        job = stack.wait_until_ended(client, "byoc-fails", timeout=JOB_TIMEOUT)
    assert job["status"] == "Failed"
    assert job["failure_reason"] == "ValueError: the container was told to fail"
    assert _containers_of(job["id"]) == []


def test_a_stopped_container_job_leaves_no_container(stack: Stack, plain: str) -> None:
    with stack.client() as client:
        job = _create(client, name="byoc-stops", image_uri=plain, hyperparameters={"wait": True})
        stack.wait_for(
            client,
            "byoc-stops",
            lambda _: any(e.get("message") == "waiting" for e in client.logs("byoc-stops")),
            timeout=JOB_TIMEOUT,
        )
        assert len(_containers_of(job["id"])) == 1
        client.stop_job("byoc-stops")
        job = stack.wait_until_ended(client, "byoc-stops", timeout=JOB_TIMEOUT)
    assert job["status"] == "Stopped"
    assert _containers_of(job["id"]) == []


# Run in the container: what its root may and may not do, each tried in a child process
# (a setuid that worked would change the probe itself), then it waits to be looked at.
PROBE = """\
import errno, json, os, socket, stat, time

def tried(action):
    pid = os.fork()
    if pid == 0:
        try:
            action()
        except OSError as exc:
            os._exit(exc.errno)
        os._exit(0)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return "allowed" if code == 0 else errno.errorcode[code]

def bind_low():
    with socket.socket() as listening:
        listening.bind(("0.0.0.0", 22))

os.makedirs("/opt/ml/model", exist_ok=True)
with open("/opt/ml/model/weights", "w") as weights:
    weights.write("w")
said = {
    "uid_map": open("/proc/self/uid_map").read().split(),
    "chown": tried(lambda: os.chown("/opt/ml/model/weights", 1000, 1000)),
    "setuid": tried(lambda: os.setuid(1000)),
    "bind_22": tried(bind_low),
    "mknod": tried(lambda: os.mknod("/tmp/null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))),
    "read_runtimes_file": tried(lambda: open("/opt/ml/.runyard/container.env").read()),
}
print("probe " + json.dumps(said), flush=True)
print("waiting", flush=True)
time.sleep(600)
"""


def test_a_containers_root_has_no_capabilities_and_is_no_one_on_the_machine(
    stack: Stack, plain: str, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "probe.py").write_text(PROBE)
    with stack.client() as client:
        job = _create(
            client,
            name="byoc-unprivileged",
            image_uri=plain,
            source_uri=client.upload_source(source),
            container_entrypoint=["/usr/bin/python3", "/opt/ml/code/probe.py"],
        )
        stack.wait_for(
            client,
            "byoc-unprivileged",
            lambda _: any(e.get("message") == "waiting" for e in client.logs("byoc-unprivileged")),
            timeout=JOB_TIMEOUT,
        )
        messages = [str(e.get("message", "")) for e in client.logs("byoc-unprivileged")]
        (container,) = _containers_of(job["id"])
        inspected = json.loads(
            subprocess.run(
                ["podman", "inspect", container], capture_output=True, text=True, check=True
            ).stdout
        )[0]
        status = Path(f"/proc/{inspected['State']['Pid']}/status").read_text()
        client.stop_job("byoc-unprivileged")
        job = stack.wait_until_ended(client, "byoc-unprivileged", timeout=JOB_TIMEOUT)
    assert job["status"] == "Stopped"
    assert _containers_of(job["id"]) == []

    host = inspected["HostConfig"]
    assert host["CapAdd"] == []
    # podman names each capability of its default set it dropped.
    assert {"CAP_CHOWN", "CAP_SETUID", "CAP_NET_BIND_SERVICE", "CAP_MKNOD"} <= set(host["CapDrop"])
    assert "no-new-privileges" in host["SecurityOpt"]
    [uid_map] = host["IDMappings"]["UidMap"]
    assert host["IDMappings"]["GidMap"] == [uid_map]
    inside, root, count = (int(part) for part in uid_map.split(":"))
    assert (inside, count) == (0, 65536)
    assert root >= 65536  # no account of the machine's, nor its root
    # The container's first process, as the machine sees it: that id, no capability.
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Uid"].split() == [str(root)] * 4
    assert fields["CapEff"] == fields["CapPrm"] == fields["CapBnd"] == "0" * 16
    assert fields["NoNewPrivs"] == "1"
    assert f"The container's users are the machine's ids {root} to {root + 65535}" in "\n".join(
        messages
    )

    (probe,) = [m.removeprefix("probe ") for m in messages if m.startswith("probe ")]
    assert json.loads(probe) == {
        "uid_map": ["0", str(root), "65536"],
        # What the dropped capabilities allowed: each refused by the kernel.
        "chown": "EPERM",  # CAP_CHOWN
        "setuid": "EPERM",  # CAP_SETUID
        "bind_22": "EACCES",  # CAP_NET_BIND_SERVICE
        "mknod": "EPERM",  # CAP_MKNOD
        # The runtime's own file in /opt/ml (root's, 0600): no CAP_DAC_OVERRIDE, and its
        # owner is no one in the container's namespace.
        "read_runtimes_file": "EACCES",
    }


def test_a_catalog_image_still_needs_the_script_it_runs(stack: Stack) -> None:
    with stack.client() as client, pytest.raises(RunyardError, match="entry_point"):
        _create(client, name="no-script", framework_version="2.13")


def test_an_image_the_engine_cannot_find_fails_the_job_saying_so(stack: Stack) -> None:
    missing = "localhost/runyard-test-nothing-here:1"
    with stack.client() as client:
        _create(client, name="byoc-missing", image_uri=missing)
        job = stack.wait_until_ended(client, "byoc-missing", timeout=JOB_TIMEOUT)
    assert job["status"] == "Failed"
    assert job["failure_reason"].startswith(
        "CannotStartContainerError: podman could not start the container: Error: "
    ), job["failure_reason"]
    assert missing in job["failure_reason"]
