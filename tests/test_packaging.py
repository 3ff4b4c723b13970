"""Runyard as the wheel an operator builds for EC2 instances (``runtime_package``) or a
cluster's image: every module of its packages is in it, and what the compatibility
directories and the console serve."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "contract",
    "provisioning",
    "service",
    "worker",
    "runtime",
    "libraries",
    "runyard",
    "migrations",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of the checkout (a build leaves build/ and
    *.egg-info/ behind it)."""
    source = tmp_path_factory.mktemp("source")
    for name in (*PACKAGES, "pyproject.toml", "README.md"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, source / name)
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(wheels), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = wheels.glob("runyard-*.whl")
    return built


def test_every_module_of_runyard_is_in_its_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    modules = {
        str(path.relative_to(REPO))
        for package in PACKAGES
        for path in (REPO / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert sorted(modules - shipped) == []
    # The console's pages, and the compatibility packages jobs import by their own names.
    assert "service/console/templates/job.html" in shipped
    assert "libraries/compat/smdistributed/dataparallel/torch/distributed.py" in shipped
    assert "libraries/horovod/compat/horovod/torch/__init__.py" in shipped
