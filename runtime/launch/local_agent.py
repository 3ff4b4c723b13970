"""The launch agent of the local backend when its instances share the machine: what ssh
is to mpirun on a cluster.

mpirun calls ``<agent> <host> <command...>`` to start its daemon "on" a host. Here every
instance is a directory on this machine, so the command runs in that instance's code
directory, with its environment and its share of the CPUs, as written by the backend in
the hosts file (``contract.agent_hosts``), once the instance is ready for it
(``handover``). The command is Open MPI's own daemon line, which it writes for a remote
shell, so it is run by one, exactly as sshd would.

    python -m runtime.launch.local_agent <hosts.json> <host> <command...>
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from contract import agent_hosts
from runtime.launch import handover

# What ssh exits with when it cannot reach or log in to a host; mpirun knows it as such.
UNREACHABLE = 255


def main() -> int:
    if len(sys.argv) < 4:
        return _give_up(
            "usage: python -m runtime.launch.local_agent <hosts.json> <host> <command...>"
        )
    hosts_file, host, *command = sys.argv[1:]
    try:
        hosts = agent_hosts.read(Path(hosts_file))
    except agent_hosts.AgentHostsError as exc:
        return _give_up(str(exc))
    if host not in hosts:
        return _give_up(f"no instance named {host!r} in this job")
    instance = hosts[host]
    try:
        patience = handover.patience()
    except handover.PatienceError as exc:
        return _give_up(str(exc))
    if not handover.wait_until_ready(Path(instance.base), patience):
        return _give_up(f"{host} was not ready for mpirun's daemon within {patience:g} s")
    if instance.cpus:
        os.sched_setaffinity(0, instance.cpus)
    # Waited for, not exec'd: a daemon that cannot start is told to the caller. (It runs
    # on in a session of its own once it is up, and mpirun ends it at the end.)
    status = subprocess.call(
        ["/bin/sh", "-c", " ".join(command)], cwd=instance.cwd, env=instance.env
    )
    if status != 0:
        handover.record_failure(f"the daemon on {host} exited with status {_shell_status(status)}")
    return _shell_status(status)


def _shell_status(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode  # as a shell reports a signal


def _give_up(message: str) -> int:
    handover.record_failure(message)
    print(f"local launch agent: {message}", file=sys.stderr, flush=True)
    return UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
