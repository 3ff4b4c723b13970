"""A job's instances are named algo-1 .. algo-N, as on SageMaker, and meet at the first."""

from __future__ import annotations

PREFIX = "algo-"
# The first host's rendezvous port, where every instance has a network of its own: the
# one SageMaker's PyTorch container exports as MASTER_PORT, which scripts may assume.
RENDEZVOUS_PORT = 7777


def host_names(instance_count: int) -> list[str]:
    return [f"{PREFIX}{index}" for index in range(1, instance_count + 1)]


def host_number(host: str) -> int:
    """The N of algo-N, to order hosts as numbers (algo-10 after algo-9); 0 for other names."""
    number = host.rpartition("-")[2]
    return int(number) if number.isdigit() else 0
