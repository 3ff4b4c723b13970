"""``horovod`` exists only in the processes of ``mpi`` jobs: the launcher's plans, the
service's own environment, and what a job's process imports under that name."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contract.instance_config import InstanceConfig, load
from runtime.launch import plan
from runtime.launch.mpi import COMPAT_DIR, HOROVOD_COMPAT_DIR, library_path
from tests.instances import launch_request, write_instances
from tests.libraries.dataparallel.launch import Layout, run_job

REPO = Path(__file__).resolve().parents[3]


def _mpirun_env(
    tmp_path: Path, distribution: dict[str, Any], pythonpath: str = "/code"
) -> dict[str, str]:
    source = tmp_path / "src"
    source.mkdir(parents=True)
    (source / "train.py").write_text("")
    request = launch_request(source, instance_count=2, distribution=distribution)
    bases = write_instances(tmp_path / "job", request, master_port=29400)
    config = load(bases["algo-1"])
    config = InstanceConfig(**{**config.__dict__, "launch_agent": ("agent",)})
    (mpirun,) = plan(config, ["python", "train.py"], {"PYTHONPATH": pythonpath}, num_gpus=0).specs
    return mpirun.env


@pytest.mark.parametrize(
    ("distribution", "offered"),
    [
        ({"mpi": {"enabled": True, "processes_per_host": 2}}, [HOROVOD_COMPAT_DIR]),
        ({"pytorchddp": {"enabled": True}}, []),
        ({"smdistributed": {"dataparallel": {"enabled": True}}}, [COMPAT_DIR]),
        (
            {
                "mpi": {"enabled": True},
                "smdistributed": {"modelparallel": {"enabled": True, "parameters": {}}},
            },
            [COMPAT_DIR],
        ),
    ],
    ids=["mpi", "pytorchddp", "smddp", "smp"],
)
def test_each_mpi_mode_offers_its_own_names_only(
    tmp_path: Path, distribution: dict[str, Any], offered: list[Path]
) -> None:
    env = _mpirun_env(tmp_path, distribution)
    assert env["PYTHONPATH"] == ":".join([*map(str, offered), "/code"])


def test_the_two_compat_directories_hold_one_name_each() -> None:
    # Each directory on a job's path offers exactly the names its mode lists: nothing of
    # one leaks into the other's jobs (a directory is a namespace package to Python).
    assert sorted(p.name for p in COMPAT_DIR.iterdir() if not p.name.startswith("__")) == [
        "smdistributed"
    ]
    assert sorted(p.name for p in HOROVOD_COMPAT_DIR.iterdir()) == ["horovod"]


def test_horovod_is_not_importable_in_the_service_environment() -> None:
    assert importlib.util.find_spec("horovod") is None
    plain = subprocess.run(
        [sys.executable, "-c", "import horovod"],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert "No module named 'horovod'" in plain.stderr


def test_a_horovod_installed_in_the_training_environment_wins(tmp_path: Path) -> None:
    image, requirements, bare = tmp_path / "image", tmp_path / "requirements", tmp_path / "bare"
    for place in (image / "horovod", requirements / "horovod", bare / "horovod"):
        place.mkdir(parents=True)
    (image / "horovod" / "__init__.py").write_text("")
    (requirements / "horovod.py").write_text("")
    assert library_path(("horovod",), sys.path) == [HOROVOD_COMPAT_DIR]
    # A directory of that name is not a package (Python would make it a namespace).
    assert library_path(("horovod",), [str(bare), *sys.path]) == [HOROVOD_COMPAT_DIR]
    assert library_path(("horovod",), [str(image), *sys.path]) == []
    # Installed from the job's requirements.txt: on the job's PYTHONPATH, which plan()
    # searches before the runtime's own path.
    env = _mpirun_env(tmp_path, {"mpi": {"enabled": True}}, pythonpath=f"/code:{requirements}")
    assert env["PYTHONPATH"] == f"/code:{requirements}"
    # SageMaker's library only runs on SageMaker: Runyard's always stands in for it.
    (image / "smdistributed").mkdir()
    (image / "smdistributed" / "__init__.py").write_text("")
    assert library_path(("smdistributed",), [str(image), *sys.path]) == [COMPAT_DIR]


def _in_a_job(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={"PYTHONPATH": f"{HOROVOD_COMPAT_DIR}:{REPO}"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_horovod_torch_is_runyards_library_re_exported() -> None:
    probe = _in_a_job(
        "import horovod, horovod.torch as hvd, libraries.horovod as rh\n"
        "assert hvd.DistributedOptimizer is rh.DistributedOptimizer\n"
        "assert hvd.broadcast_parameters is rh.broadcast_parameters\n"
        "assert sorted(hvd.__all__) == sorted(rh.__all__)\n"
        "print(horovod.__version__, hasattr(hvd, 'join'), hasattr(hvd, 'no_such_name'))\n"
    )
    assert probe.stdout.split() == ["0.28.1+runyard", "False", "False"], probe.stderr


@pytest.mark.parametrize(
    "module", ["horovod.tensorflow", "horovod.tensorflow.keras", "horovod.keras", "horovod.mxnet"]
)
def test_other_frameworks_refuse_to_import_saying_why(module: str) -> None:
    failed = _in_a_job(f"import {module}")
    assert failed.returncode != 0
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: horovod."), failed.stderr
    assert "Runyard offers only horovod.torch" in last
    assert "multi_worker_mirrored_strategy" in last


def test_a_group_the_script_made_itself_is_adopted() -> None:
    outputs = run_job(
        ["-m", "tests.libraries.horovod.job.torch_first"],
        Layout.interleaved(instances=2, per_instance=2),
    )
    places = sorted(
        json.loads(line.removeprefix("PLACE "))
        for output in outputs
        for line in output.splitlines()
        if line.startswith("PLACE ")
    )
    # Ranks alternate between the instances: local ranks count each instance's own.
    assert places == [
        [0, 4, 0, 2, 0, 2, 4.0],
        [1, 4, 0, 2, 1, 2, 4.0],
        [2, 4, 1, 2, 0, 2, 4.0],
        [3, 4, 1, 2, 1, 2, 4.0],
    ]


def test_ranks_leave_together_at_exit_without_shutdown() -> None:
    """A rank that ends first waits for the others before its group goes down: gloo aborts
    a process whose group ends while a peer may still send to it."""
    outputs = run_job(
        ["-m", "tests.libraries.horovod.job.ends_apart"],
        Layout.interleaved(instances=2, per_instance=2),
    )
    lines = [line for output in outputs for line in output.splitlines()]
    (last_done,) = [json.loads(line.removeprefix("DONE ")) for line in lines if "DONE " in line]
    ends = sorted(
        (json.loads(line.removeprefix("END ")) for line in lines if line.startswith("END ")),
        key=lambda end: end["rank"],
    )
    assert [end["rank"] for end in ends] == [0, 1, 2, 3], outputs
    assert not any(end["group_up"] for end in ends)
    assert all(end["at"] >= last_done for end in ends)
