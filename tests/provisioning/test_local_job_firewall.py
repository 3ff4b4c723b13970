"""What a job's own nftables table lets through, tried for real: a job's network made as a
launch makes it (``network.create``), a host beyond the machine on a link of its own (as
a container engine's network or another machine is), and connections tried from the
job's instances and from the machine's own processes, root's and another user's."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from provisioning.base import InstanceState
from provisioning.local import egress, network
from provisioning.local.backend import LocalBackend
from tests.instances import launch_request

# The scripts run with the system's Python, which a user other than root may run (the
# worker's may live in root's home).
PYTHON = "/usr/bin/python3"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# What a connection that the rules turn away gets: an ICMP error (EHOSTUNREACH, from
# `reject with icmpx admin-prohibited`) or a reset (ECONNREFUSED), whichever the kernel
# makes of the reject; never a timeout.
REFUSED = ("EHOSTUNREACH", "ECONNREFUSED")
FAST = 3.0  # seconds: a refusal comes at once, a dropped packet only at the timeout
TIMEOUT = 10.0

CONNECT = """
import errno, socket, sys, time
started = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    said = "connected"
except OSError as error:
    said = errno.errorcode.get(error.errno or 0, type(error).__name__)
print(said, time.monotonic() - started)
"""

SERVE = """
import socket, sys
server = socket.create_server(("", int(sys.argv[1])))
print("ready", flush=True)
while True:
    connection, peer = server.accept()
    print(peer[0], flush=True)
    connection.close()
"""

pytestmark = [
    pytest.mark.skipif(
        not Path(PYTHON).exists() or network.unavailable() is not None,
        reason=f"needs {PYTHON} and namespaces: {network.unavailable()}",
    ),
    pytest.mark.nftables,
]


@dataclass(frozen=True)
class Far:
    """A host beyond the machine: the machine's address on the link to it, its own, and
    its network namespace."""

    machine: str
    address: str
    namespace: str


@dataclass
class Site:
    far: Far
    job: network.JobNetwork
    api_port: int

    @property
    def gateway(self) -> str:
        assert self.job.egress is not None
        return self.job.egress.gateway

    def instance(self, host: str = "algo-1") -> list[str]:
        """The command prefix that runs in the instance's network namespace."""
        return ["ip", "netns", "exec", self.job.port(host).namespace]


class Listener:
    """A port listened on at every address (in a namespace, as a user), telling who
    connected."""

    def __init__(self, port: int, prefix: list[str]) -> None:
        self.process = subprocess.Popen(
            [*prefix, PYTHON, "-c", SERVE, str(port)], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"

    def heard(self) -> list[str]:
        self.process.kill()
        out, _ = self.process.communicate(timeout=10)
        return out.split()


def _connect(prefix: list[str], host: str, port: int) -> tuple[str, float]:
    shown = subprocess.run(
        [*prefix, PYTHON, "-c", CONNECT, host, str(port), str(TIMEOUT)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT + 20,
        check=True,
    ).stdout.split()
    return shown[0], float(shown[1])


def _refused(tried: tuple[str, float]) -> bool:
    said, seconds = tried
    return said in REFUSED and seconds < FAST


def _run(*argv: str, check: bool = True) -> None:
    subprocess.run(argv, capture_output=True, text=True, check=check)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def far() -> Iterator[Far]:
    # A /30 of TEST-NET-2 of this process's own, so that runs side by side keep apart.
    link = list(ipaddress.IPv4Network("198.51.100.0/24").subnets(new_prefix=30))
    base = link[os.getpid() % len(link)].network_address
    namespace, veth = f"rytest-far-{os.getpid()}", f"rytfar{os.getpid() % 100000}"
    _run("ip", "netns", "add", namespace)
    try:
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _run("ip", "address", "add", f"{base + 1}/30", "dev", veth)
        _run("ip", "link", "set", veth, "up")
        inside = ["ip", "-n", namespace]
        _run(*inside, "address", "add", f"{base + 2}/30", "dev", "eth0")
        _run(*inside, "link", "set", "eth0", "up")
        _run(*inside, "link", "set", "lo", "up")
        yield Far(str(base + 1), str(base + 2), namespace)
    finally:
        _run("ip", "netns", "delete", namespace, check=False)
        _run("ip", "link", "delete", veth, check=False)


@pytest.fixture
def site(far: Far) -> Iterator[Site]:
    """A job with a way out whose instances are told the API is at the machine's address
    on the link to the far host (as ``RUNYARD_PUBLIC_URL`` names a machine's address)."""
    job_id = uuid.uuid4().hex
    api_port = _free_port()
    with network.choosing_subnet():
        job = network.plan(
            job_id,
            ["algo-1", "algo-2"],
            network.choose_subnet(job_id),
            api_port=api_port,
            api_addresses=(far.machine,),
        )
        network.create(job)
    try:
        yield Site(far, job, api_port)
    finally:
        network.remove(job)


def test_an_address_the_machine_dnats_takes_no_instance_past_its_jobs_rules(
    site: Site,
) -> None:
    """A published container port, or any dnat rule of the machine's, forwards what comes
    to the machine's address to wherever it points: from a job, it is refused."""
    published = _free_port()
    table = f"rytest-dnat-{os.getpid()}"
    dnat = (
        f"table ip {table} {{\n"
        "  chain prerouting {\n"
        "    type nat hook prerouting priority dstnat; policy accept;\n"
        f"    ip daddr {site.gateway} tcp dport {published} dnat to {site.far.address}:8080\n"
        "  }\n"
        "}\n"
    )
    subprocess.run(["nft", "-f", "-"], input=dnat, text=True, check=True)
    far = Listener(8080, ["ip", "netns", "exec", site.far.namespace])
    try:
        # The far host itself the job reaches, as it reaches whatever the machine does.
        assert _connect(site.instance(), site.far.address, 8080)[0] == "connected"
        through_dnat = _connect(site.instance(), site.gateway, published)
    finally:
        heard = far.heard()
        _run("nft", "delete", "table", "ip", table)
    assert _refused(through_dnat), through_dnat
    assert heard == [site.far.machine]  # the direct connection, masqueraded, alone


def test_of_the_machines_own_processes_only_roots_connect_into_a_job(site: Site) -> None:
    """A port an instance listens on (its sshd, torch's rendezvous) is the job's: the
    machine's root (the worker, the runtime) reaches it, another user (a shared job's
    script, anyone logged in) does not."""
    address = site.job.port("algo-1").address
    served = Listener(5555, site.instance())
    try:
        as_nobody = _connect(NOBODY, address, 5555)
        as_root = _connect([], address, 5555)
    finally:
        heard = served.heard()
    assert _refused(as_nobody), as_nobody
    assert as_root[0] == "connected"
    assert heard == [site.gateway]


def test_of_the_machine_an_instance_reaches_the_api_at_the_address_it_is_given_alone(
    site: Site,
) -> None:
    """The API's port at the address the service URL names, served by a user other than
    root (whose answers go out all the same); not at the job's gateway, nor any other
    port of the machine, refused at once."""
    api = Listener(site.api_port, NOBODY)
    other_port = _free_port()
    other = Listener(other_port, [])
    try:
        at_its_address = _connect(site.instance(), site.far.machine, site.api_port)
        at_the_gateway = _connect(site.instance(), site.gateway, site.api_port)
        another_port = _connect(site.instance(), site.far.machine, other_port)
    finally:
        heard, other_heard = api.heard(), other.heard()
    assert at_its_address[0] == "connected"
    assert _refused(at_the_gateway), at_the_gateway
    assert _refused(another_port), another_port
    assert len(heard) == 1
    assert other_heard == []


def test_link_local_addresses_are_refused_at_once(site: Site) -> None:
    """Where clouds serve the machine's own credentials (169.254.169.254): never a
    job's, and refused, not left to time out."""
    routed = subprocess.run(["ip", "route", "get", "169.254.169.254"], capture_output=True)
    if routed.returncode != 0:
        pytest.skip("this machine routes nowhere near 169.254.169.254")
    tried = _connect(site.instance(), "169.254.169.254", 80)
    assert _refused(tried), tried


def test_a_running_jobs_table_taken_by_a_firewall_reload_is_made_again(
    site: Site, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A firewall reload (`nft flush ruleset`) takes every table, the job's with it, while
    the machine keeps forwarding: the backend's next look at the job makes it again, and
    the job is held to its rules as before."""
    backend = LocalBackend(tmp_path / "jobs", teardown_grace=1.0)
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('x')\n")
    request = launch_request(source, instance_count=1)
    materialized = backend.launch_plan(request)
    for instance in materialized.plan.instances:
        instance.argv[:] = [sys.executable, "-c", "import time; time.sleep(60)"]
    job = materialized.plan.network
    assert job is not None
    assert job.egress is not None
    prefix = ["ip", "netns", "exec", job.port("algo-1").namespace]
    peer = site.job.port("algo-1").address
    served = Listener(5555, site.instance())
    try:
        backend.apply(materialized)
        _run("nft", "delete", "table", "inet", job.egress.table)
        with caplog.at_level(logging.WARNING, logger="provisioning.local.backend"):
            statuses = backend.describe(request.job)
        assert statuses is not None
        assert [status.state for status in statuses.values()] == [InstanceState.RUNNING]
        assert request.job.id in egress.held_tables()
        assert f"made the nftables table of {request.job.name} again" in caplog.text
        to_peer = _connect(prefix, peer, 5555)
        to_metadata = _connect(prefix, "169.254.169.254", 80)
    finally:
        heard = served.heard()
        backend.teardown(request.job)
    assert _refused(to_peer), to_peer
    assert _refused(to_metadata), to_metadata
    assert heard == []
