"""Who a custom container's users are on this machine.

With podman, the container runs in a user namespace of the job's own: its root, and every
other user of its image, is an id of the machine's that no account has, so the container's
root can do on the machine what any unprivileged user can, to what it owns. It owns the
instance's /opt/ml as the job's user does with namespaces (``runtime.instance.job_user``):
the runtime hands the tree over before the container starts.

The ids are ``IDS_PER_CONTAINER`` of the range the machine sets aside for containers'
user namespaces, where it sets one: ``containers`` in /etc/subuid and /etc/subgid, where
podman's own ``--userns=auto`` takes its ids from. Where it sets none (or one that user
and group ids do not share), they are Runyard's own, above the job users' ids
(``runtime.linux.confine``), and the job's log says so. Either way the job's id picks
which ids, the same on each of its instances, so every file the runtime hands over is
ready before the engine is asked for the container (``--userns=auto`` chooses only when
it creates it).

Where the container's users cannot be mapped, its root is the machine's, with its
capabilities dropped all the same, and the job's log says why: Docker maps users for its
whole daemon (``userns-remap``) or not at all; a kernel may allow no user namespaces; and
podman sets the network sysctls its configuration names (``default_sysctls``, by default
``net.ipv4.ping_group_range``) in every container, which a container of its own users
cannot do on the job's network: the instance's network namespace is the machine's root's
(``provisioning.local.network``). ``default_sysctls = []`` in a file of
/etc/containers/containers.conf.d/ lets it (docs/images.md).
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# A container's users: root and the 65535 after it, as an image's files may name them.
IDS_PER_CONTAINER = 65536
# The user whose subordinate ids podman's rootful containers take (containers-storage).
CONTAINERS_USER = "containers"
SUBUID, SUBGID = Path("/etc/subuid"), Path("/etc/subgid")
# Runyard's own range: above the job users' (1,500,000,000 to 2,000,000,000), below the
# largest id (4294967295 is no id at all).
OWN_START = 2**31
OWN_COUNT = 2**32 - 2 * IDS_PER_CONTAINER - OWN_START
MAX_USER_NAMESPACES = Path("/proc/sys/user/max_user_namespaces")
# Where podman reads its configuration, in its order (a later setting wins), and what it
# sets where none of them names default_sysctls (containers/common's own default).
PODMAN_CONFIGURATION = (
    Path("/usr/share/containers/containers.conf"),
    Path("/etc/containers/containers.conf"),
    Path("/etc/containers/containers.conf.d"),
)
PODMAN_DEFAULT_SYSCTLS = ("net.ipv4.ping_group_range=0 0",)


@dataclass(frozen=True)
class ContainerUsers:
    """The machine's ids of a container's root (user and group, the same number; None:
    the machine's root), and a sentence for the job's log that says which and why."""

    root: int | None
    said: str

    def arguments(self) -> list[str]:
        if self.root is None:
            return []
        mapping = f"0:{self.root}:{IDS_PER_CONTAINER}"
        return ["--uidmap", mapping, "--gidmap", mapping]


def for_job(engine: Sequence[str], job_id: str) -> ContainerUsers:
    name = Path(engine[0]).name if engine else "the engine"
    if name != "podman":
        return _unmapped(f"{name} maps no users per container")
    if _user_namespaces_off():
        return _unmapped(f"this kernel allows no user namespaces ({MAX_USER_NAMESPACES} is 0)")
    if network := _network_sysctls():
        return _unmapped(
            f"podman sets {', '.join(network)} in every container, which a container of its "
            "own users cannot on the job's network (default_sysctls = [] in "
            "/etc/containers/containers.conf.d/ lets it)"
        )
    found = _set_aside(SUBUID), _set_aside(SUBGID)
    if found[0] is not None and found[0] == found[1]:
        start, count = found[0]
        why = f"from the range /etc/subuid and /etc/subgid set aside for {CONTAINERS_USER}"
    else:
        start, count = OWN_START, OWN_COUNT
        why = (
            "from Runyard's own range: /etc/subuid and /etc/subgid set no range aside for "
            f"{CONTAINERS_USER}, or none that user and group ids share"
        )
    root = start + _slot(job_id, count) * IDS_PER_CONTAINER
    said = (
        f"The container's users are the machine's ids {root} to "
        f"{root + IDS_PER_CONTAINER - 1}, its root among them ({why})"
    )
    return ContainerUsers(root=root, said=said)


def _unmapped(why: str) -> ContainerUsers:
    return ContainerUsers(
        root=None,
        said=f"The container's root is the machine's root, without capabilities: {why}",
    )


def _slot(job_id: str, count: int) -> int:
    digest = hashlib.sha256(job_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % (count // IDS_PER_CONTAINER)


def _set_aside(listing: Path) -> tuple[int, int] | None:
    """The first range of ``listing`` (name:start:count lines) for CONTAINERS_USER that
    holds a container's ids, as (start, count)."""
    try:
        lines = listing.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, rest = line.strip().partition(":")
        start, _, count = rest.partition(":")
        if name != CONTAINERS_USER or not (start.isdigit() and count.isdigit()):
            continue
        if int(count) >= IDS_PER_CONTAINER:
            return int(start), int(count)
    return None


def _user_namespaces_off() -> bool:
    try:
        return MAX_USER_NAMESPACES.read_text().strip() == "0"
    except OSError:
        return False


def _network_sysctls() -> list[str]:
    """The network sysctls podman's configuration has it set in every container, read as
    podman reads it (CONTAINERS_CONF, where set, in place of every other file)."""
    chosen = os.environ.get("CONTAINERS_CONF")
    files: list[Path] = []
    for place in [Path(chosen)] if chosen else PODMAN_CONFIGURATION:
        files += sorted(place.glob("*.conf")) if place.is_dir() else [place]
    found: list[str] = list(PODMAN_DEFAULT_SYSCTLS)
    for file in files:
        try:
            settings = tomllib.loads(file.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        named = settings.get("containers", {}).get("default_sysctls")
        if isinstance(named, list):
            found = [str(entry) for entry in named]
    return [entry for entry in found if entry.startswith("net.")]
