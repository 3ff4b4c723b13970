"""A job's instances are named algo-1 .. algo-N, as on SageMaker."""

from __future__ import annotations

PREFIX = "algo-"


def host_names(instance_count: int) -> list[str]:
    return [f"{PREFIX}{index}" for index in range(1, instance_count + 1)]


def host_number(host: str) -> int:
    """The N of algo-N, to order hosts as numbers (algo-10 after algo-9); 0 for other names."""
    number = host.rpartition("-")[2]
    return int(number) if number.isdigit() else 0
