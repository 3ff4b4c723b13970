"""Instances laid out as a backend lays them, for tests of the runtime's input channels."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contract.instance_config import InstanceConfig, load
from tests.instances import launch_request, write_instances

WAIT_SECONDS = 20.0

# How a channel named train that could not be delivered fails the job, as SageMaker words
# it (runtime.channels.download_failed), before what went wrong.
DOWNLOAD_FAILED = "Data download failed: channel train: "


def instance_configs(
    tmp_path: Path, inputs: dict[str, Any], instance_count: int = 1
) -> list[InstanceConfig]:
    """Each host's config (algo-1 first) for a job with these ``inputs`` (the job spec's
    field: channel name -> URI or {uri, input_mode, distribution, ...})."""
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text("print('unused')\n")
    request = launch_request(source, inputs=inputs, instance_count=instance_count)
    bases = write_instances(tmp_path / "job", request)
    configs = [load(base) for base in bases.values()]
    for config in configs:
        config.paths.create()
    return configs


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_SECONDS) -> None:
    """Until ``condition`` holds: the awaited state, checked every few milliseconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def files(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` by its path below it."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)
