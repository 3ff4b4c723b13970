"""Which server owns which parameter.

Greedy size balancing: parameters are taken largest first (ties broken by name) and each
goes to the server holding the fewest elements so far (ties to the lower index). The plan
depends only on names, sizes and the number of servers, so every worker computes the same
one without talking to anyone. Python's ``hash()`` of a string is salted per process, which
is why names are not hashed.
"""

from __future__ import annotations

from collections.abc import Mapping


def plan_shards(sizes: Mapping[str, int], num_servers: int) -> dict[str, int]:
    """Map each parameter name to the index of the server that owns it."""
    if num_servers < 1:
        raise ValueError("num_servers must be at least 1")
    loads = [0] * num_servers
    owners: dict[str, int] = {}
    for name in sorted(sizes, key=lambda name: (-sizes[name], name)):
        server = min(range(num_servers), key=lambda index: (loads[index], index))
        owners[name] = server
        loads[server] += sizes[name]
    return owners


def names_by_server(owners: Mapping[str, int], num_servers: int) -> list[list[str]]:
    """The plan turned around: each server's parameter names, in sorted order."""
    shards: list[list[str]] = [[] for _ in range(num_servers)]
    for name in sorted(owners):
        shards[owners[name]].append(name)
    return shards
