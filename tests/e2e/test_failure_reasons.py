"""The failure reason of 2-instance jobs whose script raises after init_process_group,
when torch prefixes its traceback with the rank, and mpirun tags each line with it too:
the script's exception and its own frames, through the real service, worker and local
backend."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

# ``--failing-rank N``: only rank N divides by zero, and the others then lose their peer
# in the all_reduce; without it, every rank divides by zero.
SCRIPT = """\
import argparse

import torch
import torch.distributed as dist


def average(total, count):
    return total / count


parser = argparse.ArgumentParser()
parser.add_argument("--failing-rank", type=int)
failing = parser.parse_args().failing_rank
dist.init_process_group("gloo")
if failing is None or dist.get_rank() == failing:
    average(float(dist.get_rank()), 0)
dist.all_reduce(torch.ones(1))
"""
# The script's frames, as the reason shows them below the exception.
FRAMES = re.compile(
    r'\n  File "[^"]*/train\.py", line 16, in <module>\n'
    r"    average\(float\(dist\.get_rank\(\)\), 0\)\n"
    r'  File "[^"]*/train\.py", line 8, in average\n'
    r"    return total / count$"
)
EXCEPTION = "AlgorithmError: ZeroDivisionError: float division by zero, exit code: 1\n"


def _failed(stack: Stack, tmp_path: Path, name: str, **spec: Any) -> str:
    source = tmp_path / name
    source.mkdir()
    (source / "train.py").write_text(SCRIPT)
    with stack.client() as client:
        stack.submit(client, source, name=name, entry_point="train.py", instance_count=2, **spec)
        job = stack.wait_until_ended(client, name, timeout=180)
    assert job["status"] == "Failed", stack.explain(job)
    return str(job["failure_reason"])


def test_torch_distributed(stack: Stack, tmp_path: Path) -> None:
    # Each instance reads its own rank's stderr; both fail alike.
    text = _failed(
        stack, tmp_path, "torchdist-zde", distribution={"torch_distributed": {"enabled": True}}
    )
    assert text.startswith(EXCEPTION + "Traceback (most recent call last):"), text
    assert FRAMES.search(text), text
    assert "[rank" not in text


def test_mpi(stack: Stack, tmp_path: Path) -> None:
    # mpirun on algo-1 reads every rank's lines, tagged "[1,1]<stderr>: [rank1]: ...", and
    # ends with its own summary ("Process name: [prterun-...@1,1]").
    text = _failed(
        stack,
        tmp_path,
        "mpi-zde",
        distribution={"mpi": {"enabled": True, "processes_per_host": 1}},
        hyperparameters={"failing-rank": 1},
    )
    assert text.startswith(EXCEPTION + "Traceback (most recent call last):"), text
    assert FRAMES.search(text), text
    assert "Process name" not in text
    assert "Connection closed" not in text
