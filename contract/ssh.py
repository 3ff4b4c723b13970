"""SSH between a job's own instances, as SageMaker's training containers have it: what the
backend that makes a job's keys and the runtime that lays them out agree on.

SageMaker's MPI drivers (the SDK's ``ModelTrainer`` with ``MPI()``, the training toolkit's
mpi runner) start ``/usr/sbin/sshd -D`` on every instance, wait until each host answers on
port 22, and reach the others with ``ssh algo-N ...``, as Open MPI's ``mpirun`` does to
start its daemons. A backend that offers it (the local backend, with namespaces) makes
keys for the job alone, once: a key pair for the job's user and a host key per instance
(never the machine's own /etc/ssh keys). It leaves each instance's share under the
instance's base directory, in ``KEYS_DIR`` (root's): the user's pair, the instance's own
host key, and ``KNOWN_HOSTS``, every host's key under its name and address. The runtime
makes the instance's /etc/ssh and the job user's ~/.ssh from them.
"""

from __future__ import annotations

# Below an instance's base directory (the runtime's own directory, which the job's user
# may pass through but not list).
KEYS_DIR = ".runyard/ssh-keys"
# The job's user's key pair (the ``.pub`` beside it), as OpenSSH names an Ed25519 key.
USER_KEY = "id_ed25519"
# The instance's host key (the ``.pub`` beside it), as openssh-server names it in /etc/ssh.
HOST_KEY = "ssh_host_ed25519_key"
# Every host of the job, ``algo-N,ADDRESS KEY`` a line.
KNOWN_HOSTS = "known_hosts"
# Where SageMaker's drivers start the daemon from (Debian's openssh-server), and its port.
SSHD = "/usr/sbin/sshd"
PORT = 22


def public(key: str) -> str:
    """The file name of the public half of the key file ``key``."""
    return f"{key}.pub"
