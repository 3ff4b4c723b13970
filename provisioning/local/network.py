"""The private network of one job's instances on this machine, made with iproute2.

Each job has a bridge of its own; each instance a network namespace (``ip netns``) joined
to it by a veth pair, named ``eth0`` inside, with an address of its own in ``SUBNET``. The
machine holds no address on the bridge: the instances reach each other and nothing else,
as under SageMaker's network isolation, and since no route leads into a job's network
every job can use the same subnet. (The runtime of each instance stays outside the
namespace: it reports, fetches and stores over the machine's own network.)

Names derive from the job id, so a retried launch finds and adopts what an earlier one made,
and teardown removes it all by name.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from contract.hosts import host_number
from contract.layout import IMAGE_BASE_DIR

SUBNET = ipaddress.ip_network("10.213.0.0/24")
NETNS_DIR = Path("/run/netns")  # where `ip netns add` keeps a namespace by name
INTERFACE = "eth0"  # the instance's end of its link, as on a machine of its own
_TOOLS = ("ip", "unshare")
# What making namespaces and the links between them takes: being root is not enough where
# a container runtime dropped these. Numbers from <linux/capability.h>.
_CAPABILITIES = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21}
# What create() makes on the machine, made in a throwaway network namespace instead: it
# asks the kernel for the same rights, and goes with the namespace.
_NETWORK_PROBE = (
    "link add ryprobe type bridge\n"
    f"link add ryprobe0 type veth peer name {INTERFACE}\n"
    "link set ryprobe0 master ryprobe up\n"
)


class NetworkError(RuntimeError):
    """iproute2 refused to build or remove part of a job's network; the message says what."""


@dataclass(frozen=True)
class Port:
    """One instance's place on its job's network."""

    host: str
    namespace: str  # the `ip netns` name
    veth: str  # the machine's end of the instance's link
    address: str

    @property
    def namespace_path(self) -> str:
        return str(NETNS_DIR / self.namespace)


@dataclass(frozen=True)
class JobNetwork:
    bridge: str
    ports: list[Port]

    @property
    def addresses(self) -> dict[str, str]:
        return {port.host: port.address for port in self.ports}

    def port(self, host: str) -> Port:
        return next(port for port in self.ports if port.host == host)


def plan(job_id: str, hosts: list[str]) -> JobNetwork:
    """The job's network, by name only; nothing is made. Interface names stay within the
    kernel's 15 characters."""
    first = next(SUBNET.hosts())
    ports = [
        Port(
            host=host,
            namespace=f"runyard-{job_id}-{host}",
            veth=f"ry{job_id[:8]}-{host_number(host)}",
            address=str(first + host_number(host)),
        )
        for host in hosts
    ]
    return JobNetwork(bridge=f"ry{job_id[:12]}", ports=ports)


def create(network: JobNetwork) -> None:
    """Make what is missing of the job's network (an earlier launch may have made part),
    and the mount point each instance's directory is shown at."""
    Path(IMAGE_BASE_DIR).mkdir(parents=True, exist_ok=True)
    if not _exists(["link", "show", network.bridge]):
        _ip("link", "add", network.bridge, "type", "bridge")
    _ip("link", "set", network.bridge, "up")
    for port in network.ports:
        if not Path(port.namespace_path).exists():
            _ip("netns", "add", port.namespace)
        if not _exists(["link", "show", port.veth]):
            _ip("link", "add", port.veth, "type", "veth", "peer", "name", INTERFACE,
                "netns", port.namespace)  # fmt: skip
        _ip("link", "set", port.veth, "master", network.bridge, "up")
        prefix = f"{port.address}/{SUBNET.prefixlen}"
        if f" {prefix} " not in _output(
            ["-n", port.namespace, "address", "show", "dev", INTERFACE]
        ):
            _ip("-n", port.namespace, "address", "add", prefix, "dev", INTERFACE)
        _ip("-n", port.namespace, "link", "set", INTERFACE, "up")
        _ip("-n", port.namespace, "link", "set", "lo", "up")


def remove(network: JobNetwork) -> None:
    """Remove whatever is left of the job's network; deleting a namespace takes its end of
    each link along, and (a moment later) the machine's end with it."""
    for port in network.ports:
        if Path(port.namespace_path).exists():
            _ip("netns", "delete", port.namespace)
        _delete_link(port.veth)
    _delete_link(network.bridge)


def _delete_link(name: str) -> None:
    result = subprocess.run(["ip", "link", "delete", name], capture_output=True, text=True)
    if result.returncode != 0 and _exists(["link", "show", name]):
        raise NetworkError(f"ip link delete {name}: {result.stderr.strip() or 'failed'}")


@functools.cache
def unavailable() -> str | None:
    """Why instances cannot have namespaces of their own on this machine, or None when
    they can (asked once per process: the answer does not change while it runs)."""
    if os.geteuid() != 0:
        return "Linux namespaces need the worker to run as root"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} (util-linux, iproute2) not found on PATH"
    lacking = _lacking_capabilities(Path("/proc/self/status"))
    if lacking:
        return f"the worker runs as root without {' and '.join(lacking)}"
    probe = ["unshare", "--uts", "--mount", "--pid", "--net", "--fork", "--mount-proc",
             "ip", "-batch", "-"]  # fmt: skip
    result = subprocess.run(
        probe, input=_NETWORK_PROBE, capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        refusal = " ".join(result.stderr.split()) or "unshare failed"
        return f"this machine refuses new namespaces or the links between them ({refusal})"
    image_base = Path(IMAGE_BASE_DIR)
    existing = next(path for path in (image_base, *image_base.parents) if path.exists())
    if not existing.is_dir() or (existing != image_base and not os.access(existing, os.W_OK)):
        return f"{IMAGE_BASE_DIR} cannot be made here, to show each instance's directory at"
    return None


def _lacking_capabilities(status: Path) -> list[str]:
    """The capabilities that making a job's network takes and that the process whose
    ``/proc/<pid>/status`` this is does not have in effect."""
    effective = next(
        int(line.split()[1], 16)
        for line in status.read_text().splitlines()
        if line.startswith("CapEff:")
    )
    return [name for name, bit in _CAPABILITIES.items() if not effective >> bit & 1]


def _exists(args: list[str]) -> bool:
    return bool(_output(args).strip())


def _output(args: list[str]) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    return result.stdout if result.returncode == 0 else ""


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip() or 'failed'}")
