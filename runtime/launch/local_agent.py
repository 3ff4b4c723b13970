"""The launch agent of the local backend: what ssh is to mpirun on a cluster.

mpirun calls ``<agent> <host> <command...>`` to start its daemon "on" a host. Here every
instance is a directory on this machine, so the command runs in that instance's code
directory, with its environment and its share of the CPUs, as written by the backend in
the hosts file. The command is Open MPI's own daemon line, which it writes for a remote
shell, so it is run by one, exactly as sshd would.

    python -m runtime.launch.local_agent <hosts.json> <host> <command...>
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def write_hosts_file(path: Path, hosts: dict[str, dict[str, Any]]) -> None:
    """``hosts``: host -> {"cwd": str, "env": {...}, "cpus": [int, ...]}."""
    path.write_text(json.dumps(hosts, indent=2))


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit("usage: python -m runtime.launch.local_agent <hosts.json> <host> <command...>")
    hosts_file, host, *command = sys.argv[1:]
    hosts = json.loads(Path(hosts_file).read_text())
    if host not in hosts:
        sys.exit(f"local launch agent: no instance named {host!r} in this job")
    instance = hosts[host]
    if instance.get("cpus"):
        os.sched_setaffinity(0, instance["cpus"])
    os.chdir(instance["cwd"])
    os.execve("/bin/sh", ["/bin/sh", "-c", " ".join(command)], instance["env"])


if __name__ == "__main__":
    main()
