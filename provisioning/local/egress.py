"""The way out of a job's network to the network the machine reaches, as a SageMaker
container reaches the internet: the machine's address on the job's bridge is its
instances' default gateway, and a table of nftables rules of the job's own (``inet
runyard-<job id>``) masquerades what they send out and holds them to the rest:

- they reach the job's own hosts (the bridge) and whatever the machine reaches beyond
  itself, through NAT;
- of the machine itself, only the API's port at the address their service URL names
  and the resolvers their /etc/resolv.conf names; nothing else it listens on (its
  database, broker, any service);
- never another job's network (the pool, ``addresses``) nor link-local addresses
  (169.254.0.0/16, where clouds serve the machine's own credentials), nor anywhere the
  machine's own DNAT rules (a container engine's published ports) would forward them;
- nothing reaches into the job's network but answers to what it sent, and of the
  machine's own processes root's (the worker, the runtime) alone.

The table is the job's alone, made and removed whole in one ``nft -f`` transaction each,
so a retried launch makes it again the same and the machine's own rules are never
touched. IPv4 forwarding must be on for any of it, as for every container engine's
networks: Runyard turns it on (and says so) when it is off.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from provisioning.local import addresses

log = logging.getLogger(__name__)

TABLE_PREFIX = "runyard-"
FORWARDING = Path("/proc/sys/net/ipv4/ip_forward")
RESOLV_CONF = Path("/etc/resolv.conf")
# Where systemd-resolved lists the resolvers its stub (127.0.0.53) asks.
RESOLVED_UPSTREAM = Path("/run/systemd/resolve/resolv.conf")
# Where clouds serve an instance's metadata and its role's credentials (169.254.169.254):
# the machine's, not a job's.
LINK_LOCAL = "169.254.0.0/16"
DNS_PORT = 53


class EgressError(RuntimeError):
    """nft refused the job's rules; the message says what."""


@dataclass(frozen=True)
class Egress:
    """A job network's way out, by name and address only."""

    table: str
    # The machine's address on the job's bridge, which its instances route through.
    gateway: str
    # The port of the API on the machine that instances may reach (None: none).
    api_port: int | None
    # The resolvers the instances' /etc/resolv.conf names, which they may ask.
    nameservers: tuple[str, ...] = ()
    # The machine's addresses the API's port is open at: those of the service URL the
    # instances are given (none where it names loopback, their own from inside).
    api_addresses: tuple[str, ...] = ()


def table_name(job_id: str) -> str:
    return f"{TABLE_PREFIX}{job_id}"


def ruleset(egress: Egress, bridge: str, subnet: str, pool: str) -> str:
    """The job's table, for ``nft -f``: made anew whole (an earlier one of the job's is
    replaced in the same transaction), in the order its rules are read."""
    table = f"inet {egress.table}"
    own = f'iifname "{bridge}"'  # from the job's instances
    to_own = f'oifname "{bridge}"'  # to them
    refuse = "reject with icmpx admin-prohibited"  # at once, where a drop would hang
    dns = api = ""
    if servers := _ipv4(egress.nameservers):
        dns = f"ip daddr {servers} meta l4proto {{ tcp, udp }} th dport {DNS_PORT}"
    if egress.api_port and (addresses := _ipv4(egress.api_addresses)):
        api = f"ip daddr {addresses} tcp dport {egress.api_port}"
    lines = [
        f"table {table} {{}}",
        f"delete table {table}",
        f"table {table} {{",
        # What the instances send to the machine itself.
        "  chain input {",
        "    type filter hook input priority filter; policy accept;",
        f"    {own} ct state established,related accept",
        f"    {own} {dns} accept" if dns else "",
        f"    {own} {api} accept" if api else "",
        f"    {own} {refuse}",
        "  }",
        # What the machine routes for them, or to them.
        "  chain forward {",
        "    type filter hook forward priority filter; policy accept;",
        # Whatever the machine DNATs (a container engine's published port, any dnat rule
        # of its own) would go on to wherever that points, past every rule below: refused
        # before anything of theirs is let through.
        f"    {own} ct status dnat {refuse}",
        f"    {own} {to_own} accept",
        f"    {to_own} ct state established,related accept",
        f"    {to_own} {refuse}",
        # Their resolvers first: a cloud's may be link-local (AWS's 169.254.169.253).
        f"    {own} {dns} accept" if dns else "",
        f"    {own} ip daddr {{ {pool}, {LINK_LOCAL} }} {refuse}",
        f"    {own} meta nfproto ipv6 {refuse}",
        # Where the way out has a smaller MTU than the bridge, the far end sends no more
        # than fits.
        f"    {own} tcp flags syn tcp option maxseg size set rt mtu",
        "  }",
        # What the machine's own processes send to them: the machine's address on the
        # bridge would otherwise let any of them (another user, a shared job's script)
        # into the instances' ports (their sshd, torch's rendezvous). Root's are the
        # worker's and the runtime's, and the kernel's own answers (its resets and ICMP
        # errors are sent from sockets of root's).
        "  chain output {",
        "    type filter hook output priority filter; policy accept;",
        f"    {to_own} ct state established,related accept",
        f"    {to_own} meta skuid 0 accept",
        f"    {to_own} {refuse}",
        "  }",
        "  chain postrouting {",
        "    type nat hook postrouting priority srcnat; policy accept;",
        f'    ip saddr {subnet} oifname != "{bridge}" masquerade',
        "  }",
        "}",
    ]
    return "\n".join(line for line in lines if line) + "\n"


def _ipv4(addresses: tuple[str, ...]) -> str:
    """The IPv4 ones of ``addresses`` as an nft set ("" for none): nftables' IPv4
    address matches take no other, and the job's network has no IPv6."""
    found = [a for a in addresses if ipaddress.ip_address(a).version == 4]
    return f"{{ {', '.join(found)} }}" if found else ""


def apply(egress: Egress, bridge: str, subnet: str, pool: str) -> None:
    """Make the job's table (anew, whole) and see that the machine forwards."""
    _nft(ruleset(egress, bridge, subnet, pool))
    _forward()


def remove(job_id: str) -> None:
    """Remove the job's table, if it has one."""
    table = f"inet {table_name(job_id)}"
    _nft(f"table {table} {{}}\ndelete table {table}\n")


def held_tables() -> list[str]:
    """The job ids of every Runyard table on the machine (none where nft is missing)."""
    if shutil.which("nft") is None:
        return []
    result = subprocess.run(
        ["nft", "list", "tables", "inet"], capture_output=True, text=True, check=False
    )
    names = [line.split()[-1] for line in result.stdout.splitlines() if line.startswith("table")]
    return [name.removeprefix(TABLE_PREFIX) for name in names if name.startswith(TABLE_PREFIX)]


@functools.cache
def unavailable() -> str | None:
    """Why jobs' networks cannot have a way out on this machine, or None when they can
    (asked once per process). Asked only where namespaces can be made (``network``)."""
    if shutil.which("nft") is None:
        return "nft (Debian's nftables package) is not found on PATH"
    forwarding = _read(FORWARDING).strip()
    if not forwarding:
        return f"{FORWARDING} cannot be read here"
    if forwarding != "1" and not os.access(FORWARDING, os.W_OK):
        return "IPv4 forwarding is off on this machine and cannot be turned on from here"
    # The rules of a job, made in a throwaway network namespace: the kernel takes them
    # there if it takes them at all (nf_tables, its NAT, reject and conntrack).
    subnet = addresses.open_subnets(addresses.DEFAULT_POOL)[0]
    gateway, resolver = subnet[1], subnet[53]
    probe = ruleset(
        Egress("runyard-probe", str(gateway), 8642, (str(resolver),), (str(gateway),)),
        "ryprobe",
        str(subnet),
        str(addresses.DEFAULT_POOL),
    )
    try:
        result = subprocess.run(
            ["unshare", "--net", "nft", "-f", "-"],
            input=probe,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the kernel did not say whether it takes the rules that would give it one ({exc})"
    if result.returncode != 0:
        refusal = " ".join(result.stderr.split())[:300] or "nft failed"
        return f"the kernel refuses the rules that would give it one ({refusal})"
    return None


def instance_resolv_conf(machine: str, upstream: str) -> tuple[str | None, tuple[str, ...]]:
    """The /etc/resolv.conf an instance with a way out needs (None: the machine's own
    serves), and the resolvers it names. ``machine`` is the machine's file, ``upstream``
    systemd-resolved's list of the resolvers its stub asks ("" where it has none). A
    resolver on the machine's loopback (a stub, a local cache) is the instance's own
    loopback from inside it, where nothing answers: the ones it asks stand in for it."""
    names = _nameservers(machine)
    reachable = tuple(name for name in names if not _loopback(name))
    if len(reachable) == len(names):
        return None, reachable
    # The job's network has no IPv6: only the IPv4 ones can stand in.
    instead = [
        name
        for name in _nameservers(upstream)
        if ipaddress.ip_address(name).version == 4 and not _loopback(name) and name not in reachable
    ]
    kept = [line for line in machine.splitlines() if not _names_loopback(line)]
    lines = [*kept, *(f"nameserver {name}" for name in instead)]
    return "\n".join(lines) + "\n", (*reachable, *instead)


def machine_resolv_conf() -> tuple[str | None, tuple[str, ...]]:
    """``instance_resolv_conf`` of this machine's files."""
    return instance_resolv_conf(_read(RESOLV_CONF), _read(RESOLVED_UPSTREAM))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _nameservers(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver" and _address(words[1]):
            found.append(words[1].partition("%")[0])
    return found


def _names_loopback(line: str) -> bool:
    words = line.split()
    return len(words) >= 2 and words[0] == "nameserver" and _loopback(words[1])


def _address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return False
    return True


def _loopback(text: str) -> bool:
    return _address(text) and ipaddress.ip_address(text.partition("%")[0]).is_loopback


def _forward() -> None:
    """IPv4 forwarding on, as a job's way out needs (the machine's firewall still
    decides what else it forwards)."""
    if FORWARDING.read_text().strip() == "1":
        return
    FORWARDING.write_text("1\n")
    log.warning(
        "turned IPv4 forwarding on (net.ipv4.ip_forward=1) so that jobs' instances reach "
        "the network, as container engines do; each job's table lets through its own "
        "instances' traffic, and the machine's firewall decides on any other"
    )


def _nft(script: str) -> None:
    result = subprocess.run(
        ["nft", "-f", "-"], input=script, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise EgressError(f"nft: {' '.join(result.stderr.split())[:500] or 'failed'}")
