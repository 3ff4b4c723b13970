"""Launchers: how the entry point is started on an instance for each distribution mode."""

from __future__ import annotations

from runtime.config import InstanceConfig
from runtime.launch import torch_distributed
from runtime.launch.workers import WorkerSpec

# Distribution modes this runtime can launch; anything else is refused at submission.
SUPPORTED_DISTRIBUTIONS = frozenset({"torch_distributed"})


def worker_specs(
    config: InstanceConfig, command: list[str], env: dict[str, str], *, num_gpus: int
) -> list[WorkerSpec]:
    if config.distribution_enabled("torch_distributed"):
        return torch_distributed.worker_specs(config, command, env, max(num_gpus, 1))
    return [WorkerSpec(command, env, config.paths.code)]
