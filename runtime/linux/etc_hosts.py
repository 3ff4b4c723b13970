"""An instance's /etc/hosts: each address its processes can meet resolves to a name, and
each name to its address, from the file alone.

No DNS server can be reached from an instance's network, so a lookup the file cannot answer
fails with EAI_AGAIN ("Temporary failure in name resolution") rather than falling back to the
number. Besides loopback and the job's hosts, the file therefore names the IPv4-mapped IPv6
form of each of their IPv4 addresses (``::ffff:10.213.0.2``): what a dual-stack socket sees
of an IPv4 peer, and what torch.distributed's store looks up when it names a connection
(``[c10d] The hostname of the client socket cannot be retrieved. err=-3`` otherwise). On
SageMaker's hosts the VPC's DNS answers those lookups.

A mapped address gets a name of its own (``algo-1.ipv4-mapped``), never the host's: a host
name that also resolved to an IPv6 address would break servers that listen on every address
of a name (asyncio's and tornado's make their IPv6 sockets IPv6-only, which then cannot bind
an IPv4-mapped address), and would list each peer twice to ``getaddrinfo``.

The machine's own entries follow for the names the runtime reaches (the service, storage,
a package index: the hosts of the URLs it is given), without the names the instance
defines: the runtime shares this file and reaches them over the machine's network, perhaps
by a name only the machine's file knows. Nothing else of the machine's file is shown.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

Entry = tuple[str, Sequence[str]]

LOOPBACK: tuple[Entry, ...] = (
    ("127.0.0.1", ("localhost",)),
    ("::1", ("localhost", "ip6-localhost", "ip6-loopback")),
)
# Debian's address for a machine's own name when it has no other.
OWN_NAME_ADDRESS = "127.0.1.1"
MAPPED_SUFFIX = ".ipv4-mapped"


def text(
    name: str, addresses: Mapping[str, str], machine: str = "", needed: Iterable[str] = ()
) -> str:
    """The file for the instance ``name`` of a job whose hosts have ``addresses``, with the
    entries of ``machine`` (the text of the machine's own /etc/hosts) for the names in
    ``needed`` (those the runtime reaches, ``url_hosts``): nothing else of the machine's."""
    own = entries(name, addresses)
    taken = {host for _, hosts in own for host in hosts}
    lines = [_line(entry) for entry in own]
    extra = machine_entries(machine, set(needed) - taken)
    if extra:
        lines += ["# This machine's own names, for the runtime", *map(_line, extra)]
    return "\n".join(lines) + "\n"


def entries(name: str, addresses: Mapping[str, str]) -> list[Entry]:
    """Loopback, the job's hosts (``name`` on its own if it has no address), and then the
    IPv4-mapped form of each IPv4 address among them."""
    found: list[Entry] = [*LOOPBACK, *((address, (host,)) for host, address in addresses.items())]
    if name not in addresses:
        found.append((OWN_NAME_ADDRESS, (name,)))
    # After the plain ones, so that an IPv4 address's own line answers for it.
    return found + [
        (f"::ffff:{address}", (mapped_name(hosts[0]),))
        for address, hosts in found
        if _is_ipv4(address)
    ]


def mapped_name(host: str) -> str:
    return f"{host}{MAPPED_SUFFIX}"


def machine_entries(machine: str, needed: Iterable[str]) -> list[Entry]:
    """The entries of the machine's /etc/hosts text ``machine`` for the names in
    ``needed`` (and without the lines left with none)."""
    wanted = set(needed)
    found: list[Entry] = []
    for line in machine.splitlines():
        address, *hosts = line.partition("#")[0].split() or [""]
        hosts = [host for host in hosts if host in wanted]
        if address and hosts:
            found.append((address, tuple(hosts)))
    return found


def url_hosts(values: Iterable[str]) -> set[str]:
    """The host names of the URLs among ``values`` (variables' values: the service's URL,
    S3's endpoint, a package index): the names the runtime and its installs reach."""
    found = set()
    for value in values:
        for word in value.split():
            if "://" in word:
                with contextlib.suppress(ValueError):
                    host = urlsplit(word).hostname
                    if host:
                        found.add(host)
    return found


def _line(entry: Entry) -> str:
    address, hosts = entry
    return f"{address}\t{' '.join(hosts)}"


def _is_ipv4(address: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address)
    except ValueError:  # a name (as EC2's and Kubernetes' host addresses are), not a number
        return False
