"""An instance as a host of its own, from the inside: the runtime is started as PID 1 of
new UTS, mount and PID namespaces (util-linux ``unshare``, by the local backend) and makes
them the host SageMaker describes; the instance's network namespace (made with iproute2's
``ip netns``) is entered only to start the job's processes.

sethostname comes with the standard library; setns(2) and mount(2) are reached through
ctypes, as ``mounts`` does: the runtime takes no dependencies.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import socket
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from runtime.linux import etc_hosts
from runtime.linux.mounts import (
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    mount,
)

# <sched.h>, <sys/mount.h>
CLONE_NEWNET = 0x40000000

HOSTS_FILE = Path("/etc/hosts")
RESOLV_CONF = Path("/etc/resolv.conf")
SHARED_MEMORY = Path("/dev/shm")  # noqa: S108 (the instance's own, mounted below)
SYSFS = Path("/sys")


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.setns.restype = ctypes.c_int
    return libc


def become_host(
    name: str,
    addresses: dict[str, str],
    base: Path,
    image_base: Path,
    hosts_file: Path,
    network_namespace: str,
    read_only: Sequence[Path] = (),
    machine_names: Iterable[str] = (),
    resolv_conf: str = "",
) -> None:
    """Take the host name ``name``; make every host's name and address resolve
    (``hosts_file``, written here from ``addresses`` and the machine's own file's entries
    for ``machine_names``, bound over it: see ``etc_hosts``); ask the resolvers
    ``resolv_conf`` names, where it names any (written beside ``hosts_file`` and bound
    over the machine's /etc/resolv.conf); show ``base`` at ``image_base``; give the
    instance shared memory of its own, and a /sys that shows its own network's
    interfaces; show each of ``read_only`` (the server's environment, the images)
    read-only. Only this instance's mount namespace sees any of it."""
    socket.sethostname(name)
    for path in read_only:
        bind_read_only(path)
    hosts_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    hosts_file.write_text(etc_hosts.text(name, addresses, _machine_hosts(), machine_names))
    bind(hosts_file, HOSTS_FILE)
    if resolv_conf and RESOLV_CONF.exists():
        resolvers = hosts_file.with_name("resolv.conf")
        resolvers.write_text(resolv_conf)
        bind(resolvers, RESOLV_CONF)
    image_base.mkdir(parents=True, exist_ok=True)  # an empty mount point on the machine
    bind(base, image_base)
    mount("shm", SHARED_MEMORY, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    # sysfs shows the interfaces of the network namespace of whoever mounts it.
    with network(network_namespace):
        mount("sysfs", SYSFS, "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "")


def _machine_hosts() -> str:
    """The machine's /etc/hosts, as this mount namespace still shows it (nothing when it
    has none)."""
    try:
        return HOSTS_FILE.read_text(errors="replace")
    except FileNotFoundError:
        return ""


@contextlib.contextmanager
def network(path: str) -> Iterator[None]:
    """The calling thread in the network namespace at ``path`` for the block: what it
    starts there (processes, threads, listening sockets) stays there after it."""
    with open("/proc/thread-self/ns/net", "rb") as own, open(path, "rb") as target:
        _setns(target.fileno())
        try:
            yield
        finally:
            _setns(own.fileno())


def _setns(fd: int) -> None:
    if _libc().setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), "setns")


def bind(source: Path, target: Path) -> None:
    """``source`` shown at ``target`` (which must exist), in this mount namespace only."""
    mount(str(source), target, "", MS_BIND, "")


def bind_read_only(path: Path) -> None:
    """``path`` and everything mounted below it, read-only from now on in this mount
    namespace: a bind of it onto itself, remounted read-only (a bind takes the flag only
    in a second call)."""
    mount(str(path), path, "", MS_BIND | MS_REC, "")
    mount("", path, "", MS_REMOUNT | MS_BIND | MS_RDONLY, "")


# Per network namespace: the lowest port a process without privileges may listen on.
UNPRIVILEGED_PORT_START = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")


def unprivileged_ports_from(port: int, network_namespace: str) -> None:
    """Any user may listen on ``port`` and above in the network namespace at
    ``network_namespace``: its own sysctl, which the machine's network and every other
    namespace's keep as they are."""
    with network(network_namespace):
        UNPRIVILEGED_PORT_START.write_text(f"{port}\n")
