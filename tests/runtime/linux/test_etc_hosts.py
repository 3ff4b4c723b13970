"""An instance's /etc/hosts (runtime.linux.etc_hosts): the file itself, and what the real
resolver (glibc, through Python's socket module) answers from it in a process that has
become an instance with namespaces.become_host, in network, UTS and mount namespaces of its
own where no DNS server can be reached, as the local backend's instances are; and the
/etc/resolv.conf such an instance is given."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from runtime.linux import etc_hosts

ADDRESSES = {"algo-1": "10.213.0.2", "algo-2": "10.213.0.3"}

MACHINE_HOSTS = """\
# The machine's file, as a distribution or a container engine writes it.
127.0.0.1 localhost
127.0.1.1\tbuild-7.example.com build-7   # the machine's own name
::1 localhost ip6-localhost ip6-loopback

192.0.2.10 runyard-server.test
192.0.2.11 algo-2 storage.test
"""


# The hosts of the URLs the runtime is given: the service's, S3's (and a name of the
# job's own, which the job's entry wins over).
NEEDED = etc_hosts.url_hosts(
    ["http://runyard-server.test:8000", "x http://storage.test:9000/ y", "plain", "http://algo-2/"]
)


def test_the_file_names_every_address_both_ways_and_the_machines_names_the_runtime_needs() -> None:
    assert sorted(NEEDED) == ["algo-2", "runyard-server.test", "storage.test"]
    assert etc_hosts.text("algo-1", ADDRESSES, MACHINE_HOSTS, NEEDED) == (
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "10.213.0.2\talgo-1\n"
        "10.213.0.3\talgo-2\n"
        "::ffff:127.0.0.1\tlocalhost.ipv4-mapped\n"
        "::ffff:10.213.0.2\talgo-1.ipv4-mapped\n"
        "::ffff:10.213.0.3\talgo-2.ipv4-mapped\n"
        # Nothing else of the machine's: not its own name, nor its other hosts.
        "# This machine's own names, for the runtime\n"
        "192.0.2.10\trunyard-server.test\n"
        # The job's algo-2 is the instance's own, whatever the machine calls algo-2.
        "192.0.2.11\tstorage.test\n"
    )


def test_a_host_without_an_address_has_its_name_on_loopback_both_ways() -> None:
    assert etc_hosts.entries("algo-1", {}) == [
        *etc_hosts.LOOPBACK,
        ("127.0.1.1", ("algo-1",)),
        ("::ffff:127.0.0.1", ("localhost.ipv4-mapped",)),
        ("::ffff:127.0.1.1", ("algo-1.ipv4-mapped",)),
    ]


def test_host_names_for_addresses_add_no_mapped_forms() -> None:
    # EC2 and Kubernetes give names where addresses go; they are resolved by their hosts.
    named = {"algo-1": "algo-1.ry-job.default.svc.cluster.local"}
    assert etc_hosts.entries("algo-1", named) == [
        *etc_hosts.LOOPBACK,
        ("algo-1.ry-job.default.svc.cluster.local", ("algo-1",)),
        ("::ffff:127.0.0.1", ("localhost.ipv4-mapped",)),
    ]


# Becomes algo-1 of a two-instance job, then reports what the resolver answers; an error is
# reported as its text. The instance's network has only loopback, which holds algo-1's
# address so that a server can listen on it.
INSTANCE = """
import asyncio, json, socket, sys, time
from pathlib import Path
from runtime.linux import namespaces

scratch = Path(sys.argv[1])
namespaces.become_host(
    "algo-1", json.loads(sys.argv[2]), scratch / "base", scratch / "opt-ml",
    scratch / "base" / ".runyard" / "hosts", "/proc/self/ns/net",
    machine_names=["runyard-server.test"],
)
slowest = 0.0

def ask(call, *args):
    global slowest
    started = time.monotonic()
    try:
        return call(*args)
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    finally:
        slowest = max(slowest, time.monotonic() - started)

def listens(host):
    async def listen():
        server = await asyncio.start_server(lambda reader, writer: None, host, 0)
        server.close()
        return "listening"
    return asyncio.run(listen())

addresses = ["10.213.0.3", "::ffff:10.213.0.3", "10.213.0.2", "::ffff:10.213.0.2",
             "127.0.0.1", "::ffff:127.0.0.1", "::1"]
report = {
    "hostname": socket.gethostname(),
    "fqdn": ask(socket.getfqdn),
    "by_address": {a: ask(lambda a: socket.gethostbyaddr(a)[0], a) for a in addresses},
    "name_info": {a: ask(lambda a: socket.getnameinfo((a, 7777), 0), a) for a in addresses},
    "algo-2": ask(lambda: sorted({i[4][0] for i in socket.getaddrinfo("algo-2", 7777)})),
    "algo-2 mapped": ask(
        lambda: socket.getaddrinfo("algo-2.ipv4-mapped", 7777, socket.AF_INET6)[0][4][0]),
    "server": ask(socket.gethostbyname, "runyard-server.test"),
    "machine's own": ask(socket.gethostbyname, "build-7"),
    "listen": {host: ask(listens, host) for host in ("algo-1", "localhost")},
}
report["slowest"] = slowest
print(json.dumps(report))
"""


def test_inside_an_instance_every_address_resolves_to_a_name_and_back(tmp_path: Path) -> None:
    machine = tmp_path / "machine-hosts"
    machine.write_text(MACHINE_HOSTS)
    # The machine's /etc/hosts is replaced by the test's own in this process's mount
    # namespace only, before the instance is made from it.
    setup = (
        'mount --bind "$1" /etc/hosts && ip link set lo up && '
        'ip address add 10.213.0.2/32 dev lo && shift && exec "$@"'
    )
    argv = [
        "unshare", "--uts", "--mount", "--net", "--fork", "sh", "-c", setup, "sh", str(machine),
        sys.executable, "-c", INSTANCE, str(tmp_path), json.dumps(ADDRESSES),
    ]  # fmt: skip
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[3],
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["hostname"], report["fqdn"]) == ("algo-1", "algo-1")
    # A peer's address, its own, and loopback: as IPv4 sockets and dual-stack IPv6 sockets
    # see them (torch.distributed's store connects and listens on the latter).
    named = {
        "10.213.0.3": "algo-2",
        "::ffff:10.213.0.3": "algo-2.ipv4-mapped",
        "10.213.0.2": "algo-1",
        "::ffff:10.213.0.2": "algo-1.ipv4-mapped",
        "127.0.0.1": "localhost",
        "::ffff:127.0.0.1": "localhost.ipv4-mapped",
        "::1": "localhost",
    }
    assert report["by_address"] == named
    assert report["name_info"] == {address: [name, "7777"] for address, name in named.items()}
    # The names lead back to the addresses, a host's own name to its IPv4 address alone:
    # servers that listen on every address of a name can still listen on it.
    assert report["algo-2"] == ["10.213.0.3"]
    assert report["algo-2 mapped"] == "::ffff:10.213.0.3"
    assert report["listen"] == {"algo-1": "listening", "localhost": "listening"}
    # The runtime reaches the service by the machine's names.
    assert report["server"] == "192.0.2.10"
    # Of the machine's own file, nothing else shows.
    assert report["machine's own"].startswith("gaierror")
    # Every answer came from the file: none waited for a DNS server (glibc waits 5 s).
    assert report["slowest"] < 2.0


# Becomes algo-1 with resolvers of its own, then reports the /etc/resolv.conf it reads.
RESOLVERS = """
import json, sys
from pathlib import Path
from runtime.linux import namespaces

scratch = Path(sys.argv[1])
namespaces.become_host(
    "algo-1", {"algo-1": "10.213.0.2"}, scratch / "base", scratch / "opt-ml",
    scratch / "base" / ".runyard" / "hosts", "/proc/self/ns/net",
    resolv_conf=sys.argv[2],
)
print(json.dumps(Path("/etc/resolv.conf").read_text()))
"""


def test_an_instance_asks_the_resolvers_it_is_given_and_the_machine_keeps_its_own(
    tmp_path: Path,
) -> None:
    given = "search corp.example.com\nnameserver 10.0.0.2\n"
    before = Path("/etc/resolv.conf").read_text()
    done = subprocess.run(
        ["unshare", "--uts", "--mount", "--net", "--fork",
         sys.executable, "-c", RESOLVERS, str(tmp_path), given],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[3],
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == given
    assert Path("/etc/resolv.conf").read_text() == before
