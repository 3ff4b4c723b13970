"""What the way out of a job's network needs of the machine: the resolvers its instances
can ask, and whether nftables and the kernel take the job's rules (said when they do not)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioning.local import egress

# The machine's file where systemd-resolved's stub answers on its loopback, and the one
# that lists the resolvers the stub asks.
STUB = """\
# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).
nameserver 127.0.0.53
options edns0 trust-ad
search corp.example.com
"""
UPSTREAM = """\
# This is /run/systemd/resolve/resolv.conf managed by man:systemd-resolved(8).
nameserver 10.0.0.2
nameserver fe80::1%eth0
nameserver 127.0.0.1
search corp.example.com
"""


def test_a_resolver_on_the_machines_loopback_gives_way_to_those_it_asks() -> None:
    text, nameservers = egress.instance_resolv_conf(STUB, UPSTREAM)
    assert text == (
        "# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).\n"
        "options edns0 trust-ad\n"
        "search corp.example.com\n"
        "nameserver 10.0.0.2\n"
    )
    # (The job's network has no IPv6: a link-local IPv6 resolver is none of its.)
    assert nameservers == ("10.0.0.2",)


def test_resolvers_the_instances_reach_leave_the_machines_file_as_it_is() -> None:
    machine = "nameserver 10.255.255.53\nnameserver 127.0.0.53\n"
    assert egress.instance_resolv_conf("nameserver 10.255.255.53\n", UPSTREAM) == (
        None,
        ("10.255.255.53",),
    )
    # Where some are on loopback, those the others reach are kept, the stub's added.
    assert egress.instance_resolv_conf(machine, UPSTREAM)[1] == ("10.255.255.53", "10.0.0.2")


def test_a_loopback_resolver_that_names_no_other_leaves_the_instances_none() -> None:
    text, nameservers = egress.instance_resolv_conf("nameserver 127.0.0.1\n", "")
    assert (text, nameservers) == ("\n", ())


def test_the_rules_let_dns_through_to_the_instances_resolvers_only() -> None:
    rules = egress.ruleset(
        egress.Egress("runyard-j", "10.213.9.1", 8642, ("10.0.0.2", "fe80::1"), ("192.0.2.7",)),
        "ryj",
        "10.213.9.0/24",
        "10.213.0.0/16",
    )
    # (nftables' IPv4 address matches take IPv4 addresses; the job's network has no IPv6.)
    allowed = 'iifname "ryj" ip daddr { 10.0.0.2 } meta l4proto { tcp, udp } th dport 53 accept'
    assert rules.count(allowed) == 2  # to the machine, and beyond it
    assert 'iifname "ryj" ip daddr { 192.0.2.7 } tcp dport 8642 accept' in rules
    assert 'ip saddr 10.213.9.0/24 oifname != "ryj" masquerade' in rules


def test_without_an_address_of_the_machine_for_it_the_api_is_not_open() -> None:
    """A service URL on loopback is the instance's own loopback from inside it: the
    API's port is then open nowhere."""
    rules = egress.ruleset(
        egress.Egress("runyard-j", "10.213.9.1", 8642), "ryj", "10.213.9.0/24", "10.213.0.0/16"
    )
    assert "8642" not in rules


@pytest.fixture
def refusing_nft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An nft that the kernel answers as one without NAT support does."""
    tools = tmp_path / "bin"
    tools.mkdir()
    nft = tools / "nft"
    nft.write_text(
        "#!/bin/sh\n"
        "echo 'Error: Could not process rule: No such file or directory' >&2\n"
        "echo 'chain postrouting { type nat hook postrouting priority srcnat; }' >&2\n"
        "exit 1\n"
    )
    nft.chmod(0o755)
    unshare = shutil.which("unshare")
    assert unshare is not None
    (tools / "unshare").symlink_to(unshare)
    monkeypatch.setenv("PATH", f"{tools}:{Path(sys.executable).parent}")
    egress.unavailable.cache_clear()
    yield
    egress.unavailable.cache_clear()


@pytest.mark.usefixtures("refusing_nft")
def test_a_kernel_that_refuses_the_rules_is_named_with_its_refusal() -> None:
    assert egress.unavailable() == (
        "the kernel refuses the rules that would give it one (Error: Could not process "
        "rule: No such file or directory chain postrouting { type nat hook postrouting "
        "priority srcnat; })"
    )
