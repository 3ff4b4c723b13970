"""What a launcher plans an instance's processes from, as one record: SageMaker's training
toolkit hands each of its runners one training environment the same way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contract.instance_config import InstanceConfig
from contract.modes import Mode
from runtime.instance.layers import PythonEnvironment


@dataclass(frozen=True)
class LaunchContext:
    config: InstanceConfig
    # The job's distribution mode; None: the entry point alone.
    mode: Mode | None
    # The entry point's command.
    entry: list[str]
    # What the launcher's own processes run with (mpirun, Runyard's helpers): without the
    # job's variables.
    env: dict[str, str]
    # What the script runs with: the job's variables included.
    script_env: dict[str, str]
    gpus: int
    # The job's Python environment, whose interpreter runs Runyard's helpers too.
    python: PythonEnvironment

    @property
    def code(self) -> Path:
        """Where every process starts: the instance's code directory."""
        return self.config.paths.code
