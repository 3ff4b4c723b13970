"""What both data-parallel benchmarks share: starting N ranks on 2 simulated instances
(the launcher's env contract, RUNYARD_HOST per instance) and reading rank 0's result.

By default every rank talks over this machine's loopback, where a "link" is a memory copy.
With a link rate (``--link-gbit``), each instance's processes run in a network namespace
of their own, joined to the others by a veth pair on a bridge as the local backend joins a
job's instances (provisioning/local/network.py), and each instance's link is shaped to that
rate in both directions by a token bucket (``tc tbf``), as a NIC of that speed would be.
Processes of one instance still reach each other over their namespace's loopback. Needs
root; the namespaces and links are removed when the run ends, however it ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from contract.hosts import host_names
from provisioning.local import network

REPO = Path(__file__).resolve().parents[1]
RESULT_PREFIX = "RESULT "


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def instances_for(processes: int) -> int:
    """Two instances whenever the processes split evenly, as the issue's layouts do."""
    return 2 if processes % 2 == 0 else 1


def launch(
    script: Path,
    processes: int,
    args: list[str],
    *,
    link_gbit: float | None = None,
    timeout: float = 1800,
) -> Any:
    """Runs ``script --worker args`` as ``processes`` ranks; returns what rank 0 reported.
    With ``link_gbit``, each instance on a link of that rate (the module's docstring)."""
    instances = instances_for(processes)
    per_instance = processes // instances
    hosts = host_names(instances)
    with _instance_network(hosts, link_gbit) as places:
        master_addr = "127.0.0.1"
        prefixes: list[list[str]] = [[] for _ in hosts]  # what each instance runs under
        extra_env: dict[str, str] = {}
        if places is not None:
            master_addr = places.port(hosts[0]).address
            prefixes = [["ip", "netns", "exec", places.port(host).namespace] for host in hosts]
            extra_env = {
                # gloo picks its interface from the host name otherwise: the instance's link.
                "GLOO_SOCKET_IFNAME": network.INTERFACE,
                # c10d warns, once per connection, that the namespaces' addresses have no
                # host name (nothing resolves them); errors still show.
                "TORCH_CPP_LOG_LEVEL": "ERROR",
            }
        port = free_port()
        children = []
        try:
            for rank in range(processes):
                instance = rank // per_instance
                env = {
                    **os.environ,
                    **extra_env,
                    "RANK": str(rank),
                    "WORLD_SIZE": str(processes),
                    "LOCAL_RANK": str(rank % per_instance),
                    "LOCAL_WORLD_SIZE": str(per_instance),
                    "MASTER_ADDR": master_addr,
                    "MASTER_PORT": str(port),
                    "RUNYARD_HOST": hosts[instance],
                    "PYTHONPATH": str(REPO),
                    # One core per rank, as a GPU per rank would be: scaling stays readable.
                    "OMP_NUM_THREADS": "1",
                }
                children.append(
                    subprocess.Popen(
                        [*prefixes[instance], sys.executable, str(script), "--worker", *args],
                        env=env,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
            outputs = [child.communicate(timeout=timeout)[0] for child in children]
        finally:
            # Interrupted or timed out: no rank may outlive its namespace.
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
    if any(child.returncode != 0 for child in children):
        raise SystemExit(f"a rank failed with {processes} processes:\n" + "\n".join(outputs))
    for line in outputs[0].splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line.removeprefix(RESULT_PREFIX))
    raise SystemExit("rank 0 reported nothing:\n" + outputs[0])


def link_label(link_gbit: float | None) -> str:
    return f"{link_gbit:g} Gbit/s per instance (tc tbf)" if link_gbit else "loopback"


@contextmanager
def _instance_network(
    hosts: list[str], link_gbit: float | None
) -> Iterator[network.JobNetwork | None]:
    """The instances' network (provisioning.local.network's JobNetwork), its links shaped
    to ``link_gbit``; None (loopback) without a rate. Removed on the way out, SIGTERM and
    SIGHUP included (turned into SystemExit so that ``finally`` runs)."""
    if not link_gbit:
        yield None
        return
    if refusal := network.unavailable():
        raise SystemExit(f"--link-gbit: {refusal}")
    # Named after this process, so that two benchmarks side by side do not collide.
    plan = network.plan(f"dpb{os.getpid()}", hosts)
    previous = {sig: signal.signal(sig, _exit_on_signal) for sig in _ENDING_SIGNALS}
    try:
        network.create(plan)
        for port in plan.ports:
            _shape(["ip", "netns", "exec", port.namespace], network.INTERFACE, link_gbit)
            _shape([], port.veth, link_gbit)  # the machine's end: what the instance receives
        yield plan
    finally:
        network.remove(plan)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _shape(prefix: list[str], device: str, gbit: float) -> None:
    """A token bucket on ``device``'s egress at ``gbit``. Its bucket holds 1 ms at that
    rate (and at least one 64 KiB segment, which veth's offloads send whole), its queue
    5 ms: enough for TCP to keep the link full without the queue hiding the rate."""
    rate = int(gbit * 1e9 / 8)  # bytes per second
    burst = max(rate // 1000, 2**17)
    command = [*prefix, "tc", "qdisc", "replace", "dev", device, "root", "tbf",
               "rate", f"{rate * 8}bit", "burst", str(burst), "latency", "5ms"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise network.NetworkError(f"{' '.join(command)}: {result.stderr.strip() or 'failed'}")


def report(result: Any) -> None:
    """Called by rank 0 of a worker."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def worker_device() -> torch.device:
    if torch.cuda.is_available():
        # The simulated instances share this machine's GPUs: one each, by global rank.
        index = int(os.environ["RANK"]) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def usable_process_counts(requested: list[int]) -> list[int]:
    """NCCL allows one rank per GPU: on CUDA, larger counts than the GPUs are skipped."""
    if not torch.cuda.is_available():
        return requested
    usable = [count for count in requested if count <= torch.cuda.device_count()]
    for count in sorted(set(requested) - set(usable)):
        print(f"skipping {count} processes: only {torch.cuda.device_count()} GPU(s)")
    return usable


def machine() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, NCCL"
    return f"{os.cpu_count()} CPU cores, gloo, 1 thread per rank"
