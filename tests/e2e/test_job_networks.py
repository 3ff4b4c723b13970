"""A job's network, as a SageMaker container's: its instances reach the network the machine
reaches (a package from PyPI, over HTTPS, by name), unless the job asks for network
isolation; never another job's instances, nor a port the machine listens on but the API's;
and nothing of it (rules, links, namespaces) is left once the job ends, however its worker
ended meanwhile.

Through the real service, worker and local backend with namespaces, the API listening on
the machine's own address as a deployment's would; each script reports what it reached."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioning.local import egress, network, processes
from runyard.client import Client
from runyard.output import describe_lines
from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

# What a script reaches: names, PyPI, and each of the targets the test gives it.
REACH = """
import errno, json, os, socket, subprocess, sys

given = json.load(open("/opt/ml/input/config/hyperparameters.json"))


def connect(host, port):
    try:
        with socket.create_connection((host, int(port)), timeout=10):
            return "connected"
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, type(error).__name__)


def resolve(name):
    try:
        return socket.gethostbyname(name)
    except OSError as error:
        return type(error).__name__


def gateway():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return socket.inet_ntoa(int(fields[2], 16).to_bytes(4, "little"))
    return None


report = {"pypi": resolve("pypi.org"), "gateway": gateway()}
# As a script's own `pip install` would, with nothing of the machine's pip settings (its
# local wheels) between it and PyPI.
download = subprocess.run(
    [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--no-cache-dir",
     "--index-url", "https://pypi.org/simple", "--timeout", "30", "--retries", "1",
     "--dest", "/tmp/downloaded", "six==1.16.0"],
    capture_output=True, text=True,
)
report["download"] = (
    sorted(os.listdir("/tmp/downloaded")) if download.returncode == 0
    else download.stderr.strip().splitlines()[-1:]
)
for name, (host, port) in json.loads(given["targets"]).items():
    if host == "gateway":
        host = report["gateway"]
    report[name] = "no route" if host is None else connect(host, port)
# Its own loopback is its own: what listens there answers.
own = socket.create_server(("127.0.0.1", 0))
report["own_loopback"] = connect("127.0.0.1", own.getsockname()[1])
print("reach " + json.dumps(report, sort_keys=True), flush=True)
"""

# Serves on every address of its instance until the test says it is done, counting who
# connected.
SERVE = """
import json, os, socket, time

server = socket.create_server(("", 5555))
server.settimeout(0.2)
print("serving", flush=True)
heard = []
deadline = time.monotonic() + 240
while not os.path.exists("/opt/ml/done") and time.monotonic() < deadline:
    try:
        connection, peer = server.accept()
        heard.append(peer[0])
        connection.close()
    except TimeoutError:
        pass
print("served " + json.dumps(heard), flush=True)
"""

SLEEP = "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n"
# A connection the job's rules refuse: an ICMP error or a reset, whichever the kernel
# makes of the reject; never a timeout.
REFUSED = ("EHOSTUNREACH", "ECONNREFUSED")


def _machine_address() -> str:
    """The machine's own address on its way out (the source of its default route)."""
    shown = subprocess.run(
        ["ip", "-json", "-4", "route", "get", "192.0.2.200"],
        capture_output=True,
        text=True,
        check=False,
    )
    routes = json.loads(shown.stdout or "[]")
    if not routes or not routes[0].get("prefsrc"):
        pytest.skip(f"this machine has no route out of itself: {shown.stderr.strip()}")
    return str(routes[0]["prefsrc"])


class Listener:
    """A port the machine listens on, counting who connects."""

    def __init__(self, host: str) -> None:
        self.server = socket.create_server((host, 0))
        self.server.settimeout(0.2)
        self.port: int = self.server.getsockname()[1]
        self.heard: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                connection, peer = self.server.accept()
            except TimeoutError:
                continue
            self.heard.append(peer[0])
            connection.close()

    def close(self) -> None:
        self._done.set()
        self._thread.join()
        self.server.close()


@pytest.fixture(scope="module")
def machine_address() -> str:
    return _machine_address()


@pytest.fixture(scope="module")
def net_stack(tmp_path_factory: pytest.TempPathFactory, machine_address: str) -> Iterator[Stack]:
    """A server whose API listens on the machine's addresses, as a deployment's does, and
    that instances are told to reach at the machine's own."""
    home = tmp_path_factory.mktemp("runyard-net")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'b.db'}")
    stack.env["RUNYARD_PUBLIC_URL"] = f"http://{machine_address}:{stack.port}"
    stack.up(host="0.0.0.0")
    yield stack
    assert stack.down() == [], "processes of finished jobs were left running"


@pytest.fixture
def listeners() -> Iterator[dict[str, Listener]]:
    """A port the machine listens on at every address, and one on its loopback alone."""
    found = {"any": Listener("0.0.0.0"), "loopback": Listener("127.0.0.1")}
    yield found
    for listener in found.values():
        listener.close()


def _source(tmp_path: Path, name: str, script: str) -> Path:
    source = tmp_path / name
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(script))
    return source


def _reports(lines: list[str], tag: str) -> list[Any]:
    return [
        json.loads(line.removeprefix(f"{tag} ")) for line in lines if line.startswith(f"{tag} ")
    ]


def _lines(client: Client, name: str) -> list[str]:
    return [str(event["message"]) for event in client.logs(name) if "message" in event]


def _left(job_id: str) -> list[str]:
    """Whatever of the job's network is still on the machine: namespaces, bridge, table."""
    left = [path.name for path in network.NETNS_DIR.glob(f"runyard-{job_id}-*")]
    bridge = network.plan(job_id, []).bridge
    if subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode == 0:
        left.append(bridge)
    return left + [f"table runyard-{held}" for held in egress.held_tables() if held == job_id]


def _ended(stack: Stack, client: Client, job: dict[str, Any]) -> dict[str, Any]:
    job = stack.wait_until_ended(client, job["name"], timeout=240)
    assert processes.marked_processes(job["id"]) == []
    assert _left(job["id"]) == []
    return job


def _reach(
    stack: Stack, client: Client, tmp_path: Path, targets: dict[str, Any], **spec: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job that ran REACH against ``targets``, and its report."""
    job = stack.submit(
        client,
        _source(tmp_path, "reach", REACH),
        entry_point="train.py",
        hyperparameters={"targets": targets},
        **spec,
    )
    job = _ended(stack, client, job)
    lines = _lines(client, job["name"])
    assert job["status"] == "Completed", stack.explain(job, list(client.logs(job["name"])))
    [report] = _reports(lines, "reach")
    return job, dict(report)


def _targets(stack: Stack, machine_address: str, listeners: dict[str, Listener]) -> dict[str, Any]:
    return {
        "api": [machine_address, stack.port],
        "api_at_gateway": ["gateway", stack.port],
        "metadata": ["169.254.169.254", 80],
        "machine_port": [machine_address, listeners["any"].port],
        "gateway_port": ["gateway", listeners["any"].port],
        "machine_loopback": ["127.0.0.1", listeners["loopback"].port],
    }


def test_an_instance_reaches_the_network_the_machine_reaches_and_of_the_machine_its_api(
    net_stack: Stack, tmp_path: Path, machine_address: str, listeners: dict[str, Listener]
) -> None:
    with net_stack.client() as client:
        job, report = _reach(
            net_stack, client, tmp_path, _targets(net_stack, machine_address, listeners)
        )
    assert job["spec"]["enable_network_isolation"] is False
    # PyPI by name, over HTTPS, as the script's own pip install would.
    assert report["pypi"][0].isdigit(), report
    assert report["download"] == ["six-1.16.0-py2.py3-none-any.whl"], report
    # Of the machine: its API, at the address the instances are told (RUNYARD_PUBLIC_URL),
    # and there alone: not at the job's gateway.
    assert report["api"] == "connected", report
    assert report["api_at_gateway"] in REFUSED, report
    # Not a port it listens on at every address, by either; its loopback is the
    # instance's own, where the machine's port is not.
    assert report["machine_port"] in REFUSED, report
    assert report["gateway_port"] in REFUSED, report
    # Nor the link-local address where clouds serve the machine's own credentials.
    assert report["metadata"] in REFUSED, report
    assert report["machine_loopback"] == "ECONNREFUSED", report
    assert report["own_loopback"] == "connected", report
    assert listeners["any"].heard == listeners["loopback"].heard == []


def test_with_network_isolation_an_instance_reaches_nothing_beyond_its_job(
    net_stack: Stack, tmp_path: Path, machine_address: str, listeners: dict[str, Listener]
) -> None:
    with net_stack.client() as client:
        job, report = _reach(
            net_stack,
            client,
            tmp_path,
            _targets(net_stack, machine_address, listeners),
            enable_network_isolation=True,
        )
    assert job["spec"]["enable_network_isolation"] is True
    assert describe_lines(job)[3] == (
        "Network:          isolated (the instances reach one another only)"
    )
    assert report["gateway"] is None  # no route out at all
    assert report["pypi"] == "gaierror", report
    assert report["download"] != ["six-1.16.0-py2.py3-none-any.whl"], report
    assert report["api"] == report["machine_port"] == "ENETUNREACH", report
    assert report["own_loopback"] == "connected", report
    assert listeners["any"].heard == listeners["loopback"].heard == []


def test_instances_of_two_jobs_cannot_reach_each_other(net_stack: Stack, tmp_path: Path) -> None:
    with net_stack.client() as client:
        serving = net_stack.submit(
            client, _source(tmp_path, "serve", SERVE), entry_point="train.py"
        )
        net_stack.wait_for(
            client, serving["name"], lambda _job: "serving" in _lines(client, serving["name"])
        )
        plan = json.loads((net_stack.home / "jobs" / serving["id"] / "plan.json").read_text())
        address = plan["network"]["ports"][0]["address"]
        gateway = plan["network"]["egress"]["gateway"]
        targets = {"peer": [address, 5555], "peer_gateway": [gateway, 5555]}
        _, report = _reach(net_stack, client, tmp_path, targets)
        (net_stack.home / "jobs" / serving["id"] / "algo-1" / "done").touch()
        serving = _ended(net_stack, client, serving)
        [heard] = _reports(_lines(client, serving["name"]), "served")
    assert serving["status"] == "Completed"
    # Each job has a subnet of its own: neither the other's instance nor its gateway.
    assert not report["gateway"].startswith(gateway.rpartition(".")[0] + ".")
    assert report["peer"] in REFUSED, report
    assert report["peer_gateway"] in REFUSED, report
    assert heard == []
    # ... while the job still reaches the world.
    assert report["download"] == ["six-1.16.0-py2.py3-none-any.whl"], report


def test_a_worker_killed_meanwhile_leaves_nothing_of_the_jobs_network(
    net_stack: Stack, tmp_path: Path
) -> None:
    with net_stack.client() as client:
        job = net_stack.submit(
            client, _source(tmp_path, "sleep", SLEEP), entry_point="train.py", instance_count=2
        )
        net_stack.wait_for(client, job["name"], lambda j: j["secondary_status"] == "Training")
        assert f"table runyard-{job['id']}" in _left(job["id"])
        net_stack.kill("worker")  # SIGKILL: whatever it held in memory is lost
        net_stack.start("worker")
        client.stop_job(job["name"])
        job = _ended(net_stack, client, job)
    assert job["status"] == "Stopped"


def test_without_nftables_the_server_and_each_job_say_why_they_get_no_way_out(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    home = tmp_path_factory.mktemp("runyard-no-nft")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'b.db'}")
    stack.env["PATH"] = str(_path_without(tmp_path / "bin", "nft", stack.env["PATH"]))
    why = "nft (Debian's nftables package) is not found on PATH"
    try:
        stack.up()
        with stack.client() as client:
            job = stack.submit(
                client, _source(tmp_path, "plain", "print('hi')\n"), entry_point="train.py"
            )
            job = _ended(stack, client, job)
            lines = _lines(client, job["name"])
        deadline = time.monotonic() + 30
        while why not in stack.log_tail("worker", 400) and time.monotonic() < deadline:
            time.sleep(0.2)
        worker_log = stack.log_tail("worker", 400)
    finally:
        assert stack.down() == []
    assert job["status"] == "Completed"
    assert job["isolation"] == "namespaces"
    assert f"This job's instances reach one another and nothing beyond: {why}" in lines
    assert (
        f"local backend: local instances reach their job's other hosts and nothing beyond: {why}"
        in worker_log
    )


def _path_without(directory: Path, tool: str, path: str) -> Path:
    """A directory of links to every command on ``path`` but ``tool``."""
    directory.mkdir()
    for entry in path.split(os.pathsep):
        for found in sorted(Path(entry).glob("*")) if Path(entry).is_dir() else []:
            link = directory / found.name
            if found.name != tool and not link.exists() and shutil.which(found.name, path=entry):
                link.symlink_to(found)
    return directory
