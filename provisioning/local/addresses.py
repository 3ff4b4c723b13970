"""Where jobs' networks take their addresses on this machine: a pool of IPv4 addresses
(``RUNYARD_LOCAL_NETWORK_POOL``, ``DEFAULT_POOL`` unless set), cut into /24s. The first
/24 is every closed network's (no route leads into one, so they may all share it); each
job with a way out has another of its own, which the machine routes to.

Both the networks (``network``) and their rules (``egress``) read these; nothing here
touches the machine.
"""

from __future__ import annotations

import ipaddress

DEFAULT_POOL = ipaddress.IPv4Network("10.213.0.0/16")
SUBNET_PREFIX = 24
# The pool's sizes a server may set: a /16 gives 255 jobs with a way out at once, a /22
# three (its first /24 is the closed networks').
WIDEST_POOL = 16
NARROWEST_POOL = 22
# "This network" (RFC 791), which no host's network may be.
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")


def closed_subnet(pool: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The subnet every closed network of the pool shares: its first /24."""
    return next(pool.subnets(new_prefix=SUBNET_PREFIX))


def open_subnets(pool: ipaddress.IPv4Network) -> list[ipaddress.IPv4Network]:
    """The /24s of the pool a job with a way out may have: all but the closed ones'."""
    return list(pool.subnets(new_prefix=SUBNET_PREFIX))[1:]


def pool_problem(text: str) -> str | None:
    """Why ``text`` cannot be the pool (None when it can): an IPv4 network, written
    with its length, from /16 to /22."""
    try:
        pool = ipaddress.IPv4Network(text)
    except ValueError as exc:
        return f"{text!r} is not an IPv4 network written as address/length ({exc})"
    if not WIDEST_POOL <= pool.prefixlen <= NARROWEST_POOL:
        sizes = f"/{WIDEST_POOL} to a /{NARROWEST_POOL}"
        return f"{text!r} is a /{pool.prefixlen}; the pool is a {sizes}"
    unfit = pool.is_loopback or pool.is_link_local or pool.is_multicast or pool.is_reserved
    if unfit or pool.subnet_of(_THIS_NETWORK):
        return f"{text!r} is not for hosts' networks (loopback, link-local, multicast, reserved)"
    return None
