"""SageMaker data-parallel scripts run as written in job processes, whose PYTHONPATH has
libraries/compat, and ``smdistributed`` exists nowhere else."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import torch

from tests.libraries.dataparallel.launch import COMPAT_DIR, REPO, Layout, run_job


def seen_lines(outputs: list[str]) -> list[dict[str, object]]:
    return [
        json.loads(line.removeprefix("SEEN "))
        for output in outputs
        for line in output.splitlines()
        if line.startswith("SEEN ")
    ]


def test_smdistributed_is_not_importable_in_the_service_environment() -> None:
    assert importlib.util.find_spec("smdistributed") is None
    plain = subprocess.run(
        [sys.executable, "-c", "import smdistributed"],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert plain.returncode != 0
    assert "No module named 'smdistributed'" in plain.stderr


def test_compat_modules_are_thin_re_exports_of_runtime() -> None:
    probe = (
        "import libraries.dataparallel as dp\n"
        "import smdistributed.dataparallel.torch.distributed as a\n"
        "import smdistributed.dataparallel.torch.parallel.distributed as b\n"
        "from smdistributed.dataparallel.torch.parallel import DistributedDataParallel as c\n"
        "assert b.DistributedDataParallel is c is dp.DistributedDataParallel\n"
        "assert a.get_local_rank is b.get_local_rank is dp.get_local_rank\n"
        "assert a.init_process_group is b.init_process_group\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env={"PYTHONPATH": f"{COMPAT_DIR}:{REPO}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_smddp_backend_script_runs_as_written() -> None:
    layout = Layout.blocks(instances=2, per_instance=2)
    outputs = run_job(
        ["-m", "tests.libraries.dataparallel.scripts.smddp_backend"], layout, compat=True
    )
    seen = sorted(seen_lines(outputs), key=lambda s: int(str(s["rank"])))
    assert [s["rank"] for s in seen] == [0, 1, 2, 3]
    for rank, observed in enumerate(seen):
        assert observed == {
            "backend": "smddp",
            "rank": rank,
            "world_size": 4,
            "local_rank": rank % 2,
            "local_size": 2,
            "is_available": True,
            "is_initialized": True,
            "all_reduce": 6.0,
            "broadcast": 11.0,
            "ddp_is_runyards": True,
            "instance_ranks": [0, 1] if rank < 2 else [2, 3],
            "grads_agree": True,
        }


def test_seed_style_example_trains_on_cpu_and_saves_the_model(tmp_path: Path) -> None:
    # Started as mpirun starts it: Open MPI's variables only.
    outputs = run_job(
        [str(REPO / "examples" / "dataparallel" / "train.py"), "--epochs", "2"],
        Layout.blocks(instances=2, per_instance=1),
        style="open_mpi",
        compat=True,
        extra_env={"SM_MODEL_DIR": str(tmp_path)},
    )
    assert "rank 1/2, local rank 0/1, device cpu" in outputs[1]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["accuracy"] > 0.9
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert sorted(state) == [
        "layers.0.bias",
        "layers.0.weight",
        "layers.3.bias",
        "layers.3.weight",
    ]
