"""The user-data script that turns a fresh EC2 instance into one host of a job.

cloud-init runs it once, as root, at first boot. Every value that comes from a job spec
or a setting reaches the shell through ``shlex.quote`` or a quoted heredoc, never as
code. However the script ends, it shuts the machine down, and the instance's shutdown
behaviour is ``terminate``: an instance never outlives its runtime, nor idles on the bill.

Peers are reached by name, as on SageMaker: the config files say ``algo-N`` wherever an
address is wanted, and the script makes those names resolve through ``/etc/hosts``. The
addresses only exist once every instance is launched, so the worker then tags each
instance with all of them (``runyard:address:<host>``) and the script reads its own tags
from the instance metadata service (IMDSv2, instance tags enabled at launch).
"""

from __future__ import annotations

import gzip
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contract.layout import IMAGE_BASE_DIR

ADDRESS_TAG_PREFIX = "runyard:address:"
# The limit EC2 puts on user-data, counted before base64 (here: after gzip).
USER_DATA_LIMIT = 16 * 1024
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEREDOC_END = "RUNYARD_EOF"


@dataclass(frozen=True)
class Layout:
    """Where the script puts things on the instance; tests point it at a scratch directory."""

    base_dir: str = IMAGE_BASE_DIR
    venv: str = "/opt/runyard/venv"
    hosts_file: str = "/etc/hosts"
    imds_url: str = "http://169.254.169.254"


@dataclass(frozen=True)
class Bootstrap:
    """What one instance needs at first boot."""

    job_name: str
    host: str
    hosts: Sequence[str]
    # The interpreter the runtime's virtual environment is built on, and pip's arguments.
    python: str
    pip_args: Sequence[str]
    # Config files by path relative to the base directory, exactly as written.
    files: Mapping[str, str]
    env: Mapping[str, str]
    address_wait_seconds: int
    # An NFS export and the path it is mounted at, or neither.
    nfs_export: str | None = None
    nfs_path: str | None = None


def render(boot: Bootstrap, layout: Layout | None = None) -> str:
    layout = layout or Layout()
    sections = [
        _header(boot),
        # Installing takes a while: the worker publishes the addresses in the meantime.
        _install(boot, layout),
        _mount(boot),
        _files(boot, layout),
        _addresses(boot, layout),
        _hostname(boot),
        _run(boot, layout),
    ]
    return "\n".join(section for section in sections if section)


def compress(script: str) -> bytes:
    """The script as sent: gzip, which cloud-init unpacks itself, fits four to five times
    more config into EC2's 16 KiB. ``mtime=0`` keeps the bytes (and so a retried launch's
    arguments, which EC2 compares under one client token) identical."""
    return gzip.compress(script.encode(), mtime=0)


def _header(boot: Bootstrap) -> str:
    return f"""#!/bin/bash
# Runyard: instance {boot.host} of training job {boot.job_name}, run once by cloud-init.
set -euo pipefail
# Shutdown terminates this instance: whatever ends the script, success or error, the
# machine goes with it.
trap 'shutdown -h now' EXIT
"""


def _addresses(boot: Bootstrap, layout: Layout) -> str:
    hosts = " ".join(shlex.quote(host) for host in boot.hosts)
    wait = int(boot.address_wait_seconds)
    return f"""# The job's hosts by name: the worker tags every instance with each host's private
# address once all are launched; this instance reads them from its own metadata.
imds_url={shlex.quote(layout.imds_url)}
imds() {{
  local token
  token=$(curl -fs -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' \\
    "$imds_url/latest/api/token") || return 1
  curl -fs -H "X-aws-ec2-metadata-token: $token" "$imds_url/latest/meta-data/$1"
}}
deadline=$((SECONDS + {wait}))
for host in {hosts}; do
  until address=$(imds "tags/instance/{ADDRESS_TAG_PREFIX}$host"); do
    if ((SECONDS >= deadline)); then
      echo "runyard: no address for $host after {wait} s" >&2
      exit 1
    fi
    sleep 2
  done
  echo "$address $host" >> {shlex.quote(layout.hosts_file)}
done
"""


def _hostname(boot: Bootstrap) -> str:
    return f"""# The instance's SageMaker host name: what its scripts and MPI see as this machine's.
hostname {shlex.quote(boot.host)}
"""


def _install(boot: Bootstrap, layout: Layout) -> str:
    venv = shlex.quote(layout.venv)
    pip = shlex.quote(f"{layout.venv}/bin/pip")
    args = " ".join(shlex.quote(arg) for arg in boot.pip_args)
    return f"""# The runtime in a virtual environment that still sees the AMI's packages (torch).
{shlex.quote(boot.python)} -m venv --system-site-packages {venv}
{pip} install --quiet --disable-pip-version-check {args}
"""


def _mount(boot: Bootstrap) -> str:
    if not boot.nfs_export or not boot.nfs_path:
        return ""
    path = shlex.quote(boot.nfs_path)
    options = "nfsvers=4.1,hard,timeo=600,retrans=2,noresvport"
    return f"""# The artifact store at the server's own path, so file:// URIs mean the same here.
mkdir -p {path}
mount -t nfs4 -o {options} \\
  {shlex.quote(boot.nfs_export)} {path}
"""


def _files(boot: Bootstrap, layout: Layout) -> str:
    lines = ["# The job's config files, as every backend writes them."]
    targets = {relative: f"{layout.base_dir}/{relative}" for relative in boot.files}
    parents = sorted({target.rsplit("/", 1)[0] for target in targets.values()})
    lines.append("mkdir -p " + " ".join(shlex.quote(parent) for parent in parents))
    for relative, content in boot.files.items():
        lines.append(_write(targets[relative], content))
    return "\n".join(lines) + "\n"


def _write(target: str, content: str) -> str:
    """A command that writes ``content`` to ``target`` byte for byte, shell-inert."""
    if not content.endswith("\n"):
        # A heredoc always ends in a newline; anything else goes as one quoted word.
        return f"printf '%s' {shlex.quote(content)} > {shlex.quote(target)}"
    end = _HEREDOC_END
    while end in content.splitlines():
        end += "_"
    # A quoted delimiter: the shell expands nothing inside ($, `, \ stay as they are).
    return f"cat > {shlex.quote(target)} <<'{end}'\n{content}{end}"


def _run(boot: Bootstrap, layout: Layout) -> str:
    lines = [f"cd {shlex.quote(layout.base_dir)}"]
    for key, value in boot.env.items():
        if not _ENV_NAME.match(key):
            raise ValueError(f"environment variable name {key!r} is not a shell identifier")
        lines.append(f"export {key}={shlex.quote(value)}")
    train = shlex.quote(f"{layout.venv}/bin/train")
    lines += [
        "# The runtime reports the job's result itself; its exit status only ends this script.",
        f'{train} || echo "runyard: the runtime exited with status $?" >&2',
    ]
    return "\n".join(lines) + "\n"
