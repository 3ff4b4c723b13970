"""The private network of one job's instances on this machine, made with iproute2.

Each job has a bridge of its own; each instance a network namespace (``ip netns``) joined
to it by a veth pair, named ``eth0`` inside, with an address of its own. The instances
reach each other by their addresses; beyond that:

- With a way out (``egress``, the default where nftables works), the job has a subnet of
  its own in the pool (``addresses``), the machine holds its first address on the bridge, every
  instance's default route leads there, and the job's nftables table masquerades what
  leaves and keeps the instances off the machine's own ports and other jobs' networks.
- Closed (network isolation, or where nftables cannot be used), the machine holds no
  address on the bridge: the instances reach each other and nothing else, as under
  SageMaker's network isolation, and since no route leads into such a network they all
  share the pool's first /24.

Either way the machine's end of each link has no IPv6 address either (a link-local one
would be a way to the machine's own ports). (The runtime of each instance stays outside
the namespace: it reports, fetches and stores over the machine's own network.)

Names derive from the job id, so a retried launch finds and adopts what an earlier one made,
and teardown removes it all by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from contract.hosts import host_number
from contract.layout import IMAGE_BASE_DIR
from provisioning.base import DECIDED_AT_LAUNCH
from provisioning.local import egress as egress_rules
from provisioning.local.addresses import DEFAULT_POOL, SUBNET_PREFIX, closed_subnet, open_subnets
from provisioning.local.egress import Egress

# What a plan written before the pool was a setting had (and still has, unless set).
CLOSED_SUBNET = closed_subnet(DEFAULT_POOL)
# Held while a launch chooses its job's subnet and until its bridge holds it, by every
# Runyard worker on the machine.
SUBNET_LOCK = Path("/run/runyard-networks.lock")
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
    subnet: str = str(CLOSED_SUBNET)
    # The way out, where the job has one; None: closed.
    egress: Egress | None = None
    # The pool the subnet was taken from, whose other networks the job's rules refuse.
    pool: str = str(DEFAULT_POOL)

    @property
    def addresses(self) -> dict[str, str]:
        return {port.host: port.address for port in self.ports}

    def port(self, host: str) -> Port:
        return next(port for port in self.ports if port.host == host)


def plan(
    job_id: str,
    hosts: list[str],
    subnet: ipaddress.IPv4Network | None = None,
    *,
    pool: ipaddress.IPv4Network = DEFAULT_POOL,
    api_port: int | None = None,
    api_addresses: tuple[str, ...] = (),
    nameservers: tuple[str, ...] = (),
) -> JobNetwork:
    """The job's network, by name only; nothing is made: closed (no ``subnet``) in the
    pool's first /24, else with a way out through the first address of ``subnet`` (the
    API's port at ``api_addresses`` and the ``nameservers`` on the machine open to it).
    Interface names stay within the kernel's 15 characters."""
    way_out = None
    if subnet is None:
        subnet = closed_subnet(pool)
    first = next(subnet.hosts())
    ports = [
        Port(
            host=host,
            namespace=f"runyard-{job_id}-{host}",
            veth=f"ry{job_id[:8]}-{host_number(host)}",
            address=str(first + host_number(host)),
        )
        for host in hosts
    ]
    if subnet != closed_subnet(pool):
        table = egress_rules.table_name(job_id)
        way_out = Egress(table, str(first), api_port, nameservers, api_addresses)
    return JobNetwork(f"ry{job_id[:12]}", ports, str(subnet), way_out, str(pool))


def plan_at_launch(
    job_id: str,
    hosts: list[str],
    *,
    pool: ipaddress.IPv4Network = DEFAULT_POOL,
    api_port: int | None = None,
    nameservers: tuple[str, ...] = (),
) -> JobNetwork:
    """The network of a job with a way out as a plan that chooses nothing shows it (a dry
    run's): its names as ``plan`` gives them; its subnet, addresses and the API's
    addresses DECIDED_AT_LAUNCH, as choosing them reads the machine's routes and asks the
    resolver."""
    named = plan(job_id, hosts, pool=pool)
    table = egress_rules.table_name(job_id)
    at_launch = (DECIDED_AT_LAUNCH,)
    way_out = Egress(table, DECIDED_AT_LAUNCH, api_port, nameservers, at_launch)
    ports = [replace(port, address=DECIDED_AT_LAUNCH) for port in named.ports]
    return replace(named, ports=ports, subnet=DECIDED_AT_LAUNCH, egress=way_out)


def choose_subnet(job_id: str, pool: ipaddress.IPv4Network = DEFAULT_POOL) -> ipaddress.IPv4Network:
    """A /24 of the pool that no route of the machine takes (``taken``: no other job's
    network, no network the machine is on), looked for from a place the job's id gives,
    so that jobs launched together seldom try the same one first. Hold
    ``choosing_subnet`` from here until the job's bridge holds it."""
    slots = open_subnets(pool)
    routes = _routed()
    start = int(hashlib.sha256(job_id.encode()).hexdigest(), 16) % len(slots)
    for slot in slots[start:] + slots[:start]:
        if not taken(slot, routes, pool):
            return slot
    raise NetworkError(f"every /{SUBNET_PREFIX} of {pool} is taken: too many jobs at once")


def taken(
    slot: ipaddress.IPv4Network,
    routes: list[ipaddress.IPv4Network],
    pool: ipaddress.IPv4Network,
) -> bool:
    """Whether a route of the machine takes ``slot``: one inside it (another job's
    network, an address of the machine's), or one narrower than the pool that holds it (a
    network the machine is on). A route as wide as the pool or wider (a VPC's or a VPN's
    10.0.0.0/8) is the way to somewhere else, not a network here: a job's more specific
    route wins over it for its own /24 alone."""
    return any(
        route.subnet_of(slot) or (slot.subnet_of(route) and route.prefixlen > pool.prefixlen)
        for route in routes
    )


@contextlib.contextmanager
def choosing_subnet() -> Iterator[None]:
    """Hold the machine's lock on choosing subnets (``choose_subnet``)."""
    with open(SUBNET_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _routed() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the machine routes to (its addresses' included), in any table;
    NetworkError where iproute2 cannot say."""
    try:
        shown = subprocess.run(
            ["ip", "-json", "-4", "route", "show", "table", "all"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        routes = json.loads(shown.stdout or "[]")
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise NetworkError(f"the machine's routes could not be read (ip route: {exc})") from exc
    found = []
    for route in routes:
        with contextlib.suppress(ValueError):
            found.append(ipaddress.IPv4Network(route.get("dst", ""), strict=False))
    return [network for network in found if network.prefixlen > 0]


def create(network: JobNetwork) -> None:
    """Make what is missing of the job's network (an earlier launch may have made part),
    and the mount point each instance's directory is shown at."""
    Path(IMAGE_BASE_DIR).mkdir(parents=True, exist_ok=True)
    prefix = ipaddress.ip_network(network.subnet).prefixlen
    if not _exists(["link", "show", network.bridge]):
        _ip("link", "add", network.bridge, "type", "bridge")
    _without_ipv6(network.bridge)
    if network.egress is not None:
        _add_address(network.bridge, f"{network.egress.gateway}/{prefix}")
    _ip("link", "set", network.bridge, "up")
    for port in network.ports:
        if not Path(port.namespace_path).exists():
            _ip("netns", "add", port.namespace)
        if not _exists(["link", "show", port.veth]):
            _ip("link", "add", port.veth, "type", "veth", "peer", "name", INTERFACE,
                "netns", port.namespace)  # fmt: skip
        _without_ipv6(port.veth)
        _ip("link", "set", port.veth, "master", network.bridge, "up")
        inside = ["-n", port.namespace]
        _add_address(INTERFACE, f"{port.address}/{prefix}", inside)
        _ip(*inside, "link", "set", INTERFACE, "up")
        _ip(*inside, "link", "set", "lo", "up")
        if network.egress is not None:
            _ip(*inside, "route", "replace", "default", "via", network.egress.gateway)
    apply_rules(network)


def apply_rules(network: JobNetwork) -> None:
    """(Re)make the job's table, where it has a way out: whole, in one transaction."""
    if network.egress is None:
        return
    try:
        egress_rules.apply(network.egress, network.bridge, network.subnet, network.pool)
    except egress_rules.EgressError as exc:
        raise NetworkError(str(exc)) from exc


def remove(network: JobNetwork) -> None:
    """Remove whatever is left of the job's network; deleting a namespace takes its end of
    each link along, and (a moment later) the machine's end with it."""
    for port in network.ports:
        if Path(port.namespace_path).exists():
            _delete_namespace(port.namespace)
        _delete_link(port.veth)
    _delete_link(network.bridge)
    if network.egress is not None:
        _remove_table(network.egress.table.removeprefix(egress_rules.TABLE_PREFIX))


def remove_job(job_id: str) -> None:
    """Remove, by name, whatever of the job's network is left where no plan names it
    any more: its namespaces, bridge and table."""
    if shutil.which("ip") is None:
        return  # none was ever made here
    for path in NETNS_DIR.glob(f"runyard-{job_id}-*"):
        _delete_namespace(path.name)
    bridge = plan(job_id, []).bridge
    # The machine's ends of the instances' links go with their namespaces only a moment
    # later: those still on the bridge are removed now.
    for link in _ports_of(bridge):
        _delete_link(link)
    _delete_link(bridge)
    if job_id in egress_rules.held_tables():
        _remove_table(job_id)


def held_jobs() -> set[str]:
    """The ids of every job that this machine holds a namespace or a table of."""
    prefix = "runyard-"
    named = [path.name.removeprefix(prefix) for path in NETNS_DIR.glob(f"{prefix}*-algo-*")]
    return {name.rpartition("-algo-")[0] for name in named} | set(egress_rules.held_tables())


def _remove_table(job_id: str) -> None:
    try:
        egress_rules.remove(job_id)
    except egress_rules.EgressError as exc:
        raise NetworkError(str(exc)) from exc


def _delete_namespace(name: str) -> None:
    result = subprocess.run(["ip", "netns", "delete", name], capture_output=True, text=True)
    if result.returncode != 0 and (NETNS_DIR / name).exists():
        raise NetworkError(f"ip netns delete {name}: {result.stderr.strip() or 'failed'}")


def _add_address(device: str, prefix: str, namespace: list[str] | None = None) -> None:
    """``prefix`` (address/length) on ``device`` (in the namespace ``-n NAME`` names),
    unless it holds it already."""
    namespace = namespace or []
    if f" {prefix} " not in _output([*namespace, "address", "show", "dev", device]):
        _ip(*namespace, "address", "add", prefix, "dev", device)


def _without_ipv6(device: str) -> None:
    """No IPv6 address for the machine on the device (where the machine has IPv6)."""
    switch = Path("/proc/sys/net/ipv6/conf") / device / "disable_ipv6"
    if switch.exists() and switch.read_text().strip() != "1":
        switch.write_text("1\n")


def _ports_of(bridge: str) -> list[str]:
    """The links the bridge holds (none where it is gone)."""
    shown = _output(["-json", "link", "show", "master", bridge])
    return [str(link["ifname"]) for link in json.loads(shown or "[]")]


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
    try:
        result = subprocess.run(
            probe, input=_NETWORK_PROBE, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"this machine did not answer whether it allows new namespaces ({exc})"
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
