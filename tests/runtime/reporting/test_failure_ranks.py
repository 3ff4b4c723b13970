"""Failure reasons of scripts run as several ranks: the stderr that torchrun and mpirun
print when a script divides by zero after ``init_process_group`` (gloo, CPU, 2 processes).

The files in ``stderr/`` are what real runs printed (torch 2.13, Open MPI 5.0's mpirun with
``--tag-output`` and Runyard's rank shim, as the mpirun launcher runs it), with only their
directories renamed: /opt/ml/code for the scripts, /opt/conda for the interpreter. The
scripts: ``zde.py`` (every rank divides by zero), ``zde_one.py`` (rank 1 does, rank 0 then
fails in an all_reduce whose peer is gone), ``zde_early.py`` (every rank, before
init_process_group), ``zde_record.py`` (``zde.py`` with torch's ``@record`` on main). The last
two tests run torchrun and mpirun for real."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from provisioning.local.backend import free_port
from runtime.reporting import torchrun_summary
from runtime.reporting.failure import reason

CAPTURED = Path(__file__).parent / "stderr"
REPO = Path(__file__).resolve().parents[3]


def _captured(name: str) -> list[str]:
    return (CAPTURED / f"{name}.txt").read_text().splitlines()


def _reason(lines: list[str], tmp_path: Path) -> str:
    return reason(1, lines, tmp_path / "failure")


def _every_rank_divides(script: str = "/opt/ml/code/zde.py") -> str:
    return "\n".join(
        [
            "AlgorithmError: ZeroDivisionError: float division by zero, exit code: 1",
            "Traceback (most recent call last):",
            f'  File "{script}", line 17, in <module>',
            "    main()",
            f'  File "{script}", line 14, in main',
            "    average(10.0 * (rank + 1), 0)",
            f'  File "{script}", line 7, in average',
            "    return total / count",
        ]
    )


def _rank_one_divides(script: str = "/opt/ml/code/zde_one.py") -> str:
    return "\n".join(
        [
            "AlgorithmError: ZeroDivisionError: float division by zero, exit code: 1",
            "Traceback (most recent call last):",
            f'  File "{script}", line 20, in <module>',
            "    main()",
            f'  File "{script}", line 16, in main',
            "    average(10.0, 0)",
            f'  File "{script}", line 8, in average',
            "    return total / count",
        ]
    )


def test_torch_prefixes_and_torchruns_summary(tmp_path: Path) -> None:
    # "[rank1]: ..." then "[rank0]: ...", then torchrun's ChildFailedError naming rank 0.
    assert _reason(_captured("torchrun"), tmp_path) == _every_rank_divides()


def test_one_process_whose_lines_torch_prefixed(tmp_path: Path) -> None:
    # Runyard's torch_distributed launcher reads each rank's stderr on its own.
    lines = [line for line in _captured("torchrun") if line.startswith("[rank1]:")]
    assert len(lines) == 9
    assert _reason(lines, tmp_path) == _every_rank_divides()


def test_mpirun_tags_around_torch_prefixes(tmp_path: Path) -> None:
    # "[1,0]<stderr>: [rank0]: Traceback ...", then mpirun's "Process name: [prterun-...]".
    text = _reason(_captured("mpirun"), tmp_path)
    assert text == _every_rank_divides()


def test_open_mpi_4s_tags_without_a_space(tmp_path: Path) -> None:
    lines = [line.replace("]<stderr>: ", "]<stderr>:") for line in _captured("mpirun")]
    assert lines[0].startswith("[1,0]<stderr>:[rank0]: Traceback")
    assert _reason(lines, tmp_path) == _every_rank_divides()


def test_the_sagemaker_toolkits_rank_tags(tmp_path: Path) -> None:
    # The training toolkit prints "[1,mpirank:1,algo-2]<stderr>:" for Open MPI's "[1,1]".
    lines = [
        re.sub(
            r"^\[1,(\d)\]<stderr>: ",
            lambda tag: f"[1,mpirank:{tag[1]},algo-{int(tag[1]) + 1}]<stderr>:",
            line,
        )
        for line in _captured("mpirun_zde_early")
    ]
    assert lines[0] == "[1,mpirank:0,algo-1]<stderr>:Traceback (most recent call last):"
    assert _reason(lines, tmp_path) == "\n".join(
        [
            "AlgorithmError: ZeroDivisionError: float division by zero, exit code: 1",
            "Traceback (most recent call last):",
            '  File "/opt/ml/code/zde_early.py", line 5, in <module>',
            "    average(10.0, 0)",
            '  File "/opt/ml/code/zde_early.py", line 2, in average',
            "    return total / count",
        ]
    )


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun"])
def test_the_rank_that_failed_first_not_its_peer(launcher: str, tmp_path: Path) -> None:
    # Rank 1 divides by zero; rank 0's all_reduce then loses its peer, and its
    # RuntimeError is the last traceback printed. Both launchers name rank 1.
    lines = _captured(f"{launcher}_zde_one")
    assert any("Connection closed by peer" in line for line in lines)
    assert _reason(lines, tmp_path) == _rank_one_divides()


def test_torchruns_root_cause_decides_only_when_it_failed_alone(tmp_path: Path) -> None:
    lines = _captured("torchrun_zde_one")
    summary = torchrun_summary.find(lines)
    assert summary is not None
    assert summary.root_cause is not None
    # Both ranks failed in the same second: torchrun's pick (rank 1, here) is arbitrary.
    assert (summary.root_cause.rank, summary.root_cause_alone) == (1, False)
    # Had rank 0 failed a second before rank 1, its exception would be the reason, though
    # rank 1's traceback came first.
    swapped = {
        "  rank      : 0 (local_rank: 0)": "  rank      : 1 (local_rank: 1)",
        "  rank      : 1 (local_rank: 1)": "  rank      : 0 (local_rank: 0)",
    }
    lines = [swapped.get(line, line) for line in lines]
    lines[lines.index("  time      : 2026-11-28_00:29:33")] = "  time      : 2026-11-28_00:29:34"
    summary = torchrun_summary.find(lines)
    assert summary is not None
    assert summary.root_cause is not None
    assert (summary.root_cause.rank, summary.root_cause_alone) == (0, True)
    # Its error says only that its peer went away, the effect of rank 1's: rank 1's stays
    # the reason.
    assert _reason(lines, tmp_path) == _rank_one_divides()
    # An error of its own (a timeout, here) is the reason.
    lines = [line.replace("Connection closed by peer", "Timed out in recv from") for line in lines]
    text = _reason(lines, tmp_path)
    assert text.startswith("AlgorithmError: RuntimeError: [/__w/pytorch/pytorch/"), text
    assert "Timed out in recv from" in text
    assert "dist.all_reduce(torch.ones(1))" in text


def test_mpiruns_first_rank_to_exit_is_passed_over_where_it_only_lost_its_peer(
    tmp_path: Path,
) -> None:
    # On a busy machine rank 0 can exit before rank 1 has torn torch down, and mpirun then
    # names rank 0, whose error is that rank 1's connection closed.
    lines = _captured("mpirun_zde_one")
    named = [line for line in lines if "Process name:" in line]
    assert named, lines
    swapped = [line.replace(",1]", ",0]") if "Process name:" in line else line for line in lines]
    assert swapped != lines
    assert _reason(swapped, tmp_path) == _rank_one_divides()


def test_torchruns_own_traceback_never_explains(tmp_path: Path) -> None:
    # Before init_process_group nothing is prefixed: the ranks' tracebacks, a line of
    # torchrun's log, then torchrun's traceback ending in ChildFailedError.
    text = _reason(_captured("torchrun_zde_early"), tmp_path)
    assert text.startswith(
        "AlgorithmError: ZeroDivisionError: float division by zero, exit code: 1\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/ml/code/zde_early.py", line 5, in <module>'
    ), text
    assert "ChildFailedError" not in text
    assert "torch/distributed" not in text


def test_a_traceback_recorded_in_torchruns_summary(tmp_path: Path) -> None:
    lines = _captured("torchrun_record")
    summary = torchrun_summary.find(lines)
    assert summary is not None
    assert summary.root_cause is not None
    assert (summary.root_cause.rank, summary.root_cause.exit_code) == (0, 1)
    wrapper = "/opt/conda/lib/python3.11/site-packages/torch/distributed/elastic/"
    wrapper += "multiprocessing/errors/__init__.py"
    assert summary.root_cause.traceback == [
        "Traceback (most recent call last):",
        f'  File "{wrapper}", line 367, in wrapper',
        "    return f(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^",
        '  File "/opt/ml/code/zde_record.py", line 16, in main',
        "    average(10.0 * (rank + 1), 0)",
        '  File "/opt/ml/code/zde_record.py", line 8, in average',
        "    return total / count",
        "           ~~~~~~^~~~~~~",
        "ZeroDivisionError: float division by zero",
    ]
    # Where the ranks' own lines have left the tail, the recorded traceback explains.
    summary_only = [line for line in lines if not line.startswith("[rank")]
    assert _reason(summary_only, tmp_path) == "\n".join(
        [
            "AlgorithmError: ZeroDivisionError: float division by zero, exit code: 1",
            *summary.root_cause.traceback[:3],
            *summary.root_cause.traceback[4:-2],
        ]
    )
    # Where they have not, the rank's own traceback has its outer frames too.
    assert _reason(lines, tmp_path).startswith(
        "AlgorithmError: ZeroDivisionError: float division by zero, exit code: 1\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/ml/code/zde_record.py", line 19, in <module>\n'
    )


def test_without_a_traceback_torchruns_root_cause_is_the_reason(tmp_path: Path) -> None:
    summary_only = [line for line in _captured("torchrun_zde_one") if not line.startswith("[rank")]
    assert _reason(summary_only, tmp_path) == (
        "AlgorithmError: ChildFailedError: rank 1 (local_rank: 1) exited first with code 1, "
        "exit code: 1"
    )


# As zde_one.py: rank 1 divides by zero, rank 0 waits in an all_reduce for it.
RANK_ONE_DIVIDES = """\
import time

import torch
import torch.distributed as dist


def average(total, count):
    return total / count


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 1:
        time.sleep(0.5)
        average(10.0, 0)
    dist.all_reduce(torch.ones(1))


main()
"""


def _run(argv: list[str], script: Path) -> list[str]:
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        argv, env=env, cwd=script.parent, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr
    return done.stderr.splitlines()


def test_real_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "zde_one.py"
    script.write_text(RANK_ONE_DIVIDES)
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    lines = _run([*argv, "--master_port", str(free_port()), str(script)], script)
    assert _reason(lines, tmp_path) == _rank_one_divides(str(script)), "\n".join(lines)


def test_real_mpirun(tmp_path: Path) -> None:
    script = tmp_path / "zde_one.py"
    script.write_text(RANK_ONE_DIVIDES)
    mpirun = Path(sys.executable).with_name("mpirun")
    argv = [str(mpirun), "-np", "2", "--bind-to", "none", "--map-by", "slot", "--tag-output"]
    argv += ["--allow-run-as-root"] if os.geteuid() == 0 else []
    argv += ["-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "PYTHONPATH"]
    lines = _run(
        [*argv, sys.executable, "-m", "runtime.launch.mpi_rank", sys.executable, str(script)],
        script,
    )
    assert _reason(lines, tmp_path) == _rank_one_divides(str(script)), "\n".join(lines)
