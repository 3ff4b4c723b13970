"""The two images, checked without a Docker engine.

The Dockerfiles are parsed and held to what the code expects of them: pinned bases, sources
that exist and survive .dockerignore, entry points that are this distribution's console
scripts and start. The wheels they install are built here from exactly the files each
Dockerfile copies, and the training image's wheel is installed, with no dependencies, into
a bare interpreter where `train` must still start: that is what makes `--no-deps` safe.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.deploy import dockerfile
from tests.deploy.support import (
    REPO,
    SERVICE_COMMANDS,
    check_runyard_args,
    console_scripts,
    pyproject,
    venv_script,
)

RUNTIME = REPO / "runtime" / "Dockerfile"
SERVICE = REPO / "service" / "Dockerfile"
DOCKERFILES = [pytest.param(RUNTIME, id="runtime"), pytest.param(SERVICE, id="service")]
# <name>:<version>[-variant]: a release, not a moving tag such as latest or 3.11-slim.
PIP = (sys.executable, "-m", "pip")
PINNED_TAG = re.compile(r"^[a-z0-9./-]+:\d+\.\d+\.\d+(-[a-z0-9.-]+)?$")


def _stages(path: Path) -> list[dockerfile.Stage]:
    return dockerfile.parse(path)


def _copies(path: Path) -> list[tuple[dockerfile.Stage, list[str], str]]:
    """(stage, sources, destination) of every COPY from the build context."""
    found = []
    for stage in _stages(path):
        for copy in stage.all("COPY"):
            if "from" not in copy.flags:
                *sources, destination = copy.args
                found.append((stage, sources, destination))
    return found


def _pip_installs(stage: dockerfile.Stage) -> list[list[str]]:
    """The arguments of every `pip install` in a stage's RUN lines."""
    installs = []
    for run in stage.all("RUN"):
        for command in re.split(r"&&|;|\bthen\b|\belse\b", " ".join(run.args)):
            words = command.split()
            if words[:2] == ["pip", "install"]:
                installs.append(words[2:])
    return installs


@pytest.mark.parametrize("path", DOCKERFILES)
def test_base_images_are_python_311_slim_pinned_by_tag(path: Path) -> None:
    stages = _stages(path)
    names = {stage.name for stage in stages if stage.name}
    external = [stage.image for stage in stages if stage.image not in names]
    assert external
    for image in external:
        assert PINNED_TAG.match(image), f"{path.name}: {image} is not pinned to a release tag"
        assert "-slim" in image
        # Node only fetches the console's pinned browser libraries; what ships is Python.
        assert image.startswith(("python:3.11.", "node:")), image
    assert stages[-1].image.startswith("python:3.11.")


@pytest.mark.parametrize("path", DOCKERFILES)
def test_copy_sources_exist_and_are_in_the_build_context(path: Path) -> None:
    ignore = dockerfile.DockerIgnore((REPO / ".dockerignore").read_text())
    copies = _copies(path)
    assert copies
    for _stage, sources, _destination in copies:
        for source in sources:
            assert (REPO / source).exists(), f"{path}: COPY {source}: no such file in the repo"
            assert not ignore.excluded(source), f"COPY {source}: excluded by .dockerignore"
            if (REPO / source).is_dir():
                assert not ignore.excluded(f"{source}/__init__.py")


def test_dockerignore_keeps_the_venv_git_tests_and_secrets_out() -> None:
    ignore = dockerfile.DockerIgnore((REPO / ".dockerignore").read_text())
    for path in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", ".env", ".runyard/token"):
        assert ignore.excluded(path), path
    assert ignore.excluded("runtime/__pycache__/train.cpython-311.pyc")
    assert not ignore.excluded("runtime/train.py")
    assert not ignore.excluded("migrations/versions/0001_initial.py")


def test_runtime_image_runs_train_in_opt_ml() -> None:
    final = _stages(RUNTIME)[-1]
    entrypoint = final.last("ENTRYPOINT")
    assert entrypoint is not None
    assert entrypoint.exec_form
    assert entrypoint.args == ["train"]
    assert console_scripts()["train"] == "runtime.train:main"
    assert final.last("WORKDIR").args == ["/opt/ml"]
    assert dockerfile.env(final)["SM_BASE_DIR"] == "/opt/ml"
    # Whatever CMD a pod gives, the backend's pod spec runs `train` itself.
    assert final.last("CMD") is None


def test_runtime_image_installs_the_train_extra_and_no_control_plane_dependency() -> None:
    stages = _stages(RUNTIME)
    installs = _pip_installs(stages[-1])
    requirements = [
        Requirement(arg)
        for args in installs
        for arg in args
        if not arg.startswith(("-", "/", ".", "$")) and "${" not in arg
    ]
    by_name = {req.name: str(req.specifier) for req in requirements}
    for wanted in map(Requirement, pyproject()["project"]["optional-dependencies"]["train"]):
        assert by_name.get(wanted.name) == str(wanted.specifier), f"{wanted} not installed"
    project = pyproject()["project"]
    train = {Requirement(dep).name for dep in project["optional-dependencies"]["train"]}
    control_plane = {Requirement(dep).name for dep in project["dependencies"]} - train
    assert not control_plane & set(by_name)
    # The distribution itself goes in without its dependencies, from the wheel stage.
    assert any("--no-deps" in args and any(a.endswith(".whl") for a in args) for args in installs)
    # torch: the CPU index unless the build says otherwise.
    args = {i.args[0].split("=")[0]: i.args[0] for i in stages[-1].all("ARG")}
    assert args["TORCH_INDEX_URL"] == "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu"
    assert any('--index-url "${TORCH_INDEX_URL}"' in run.raw for run in stages[-1].all("RUN"))


def test_service_image_runs_runyard_as_a_non_root_user() -> None:
    final = _stages(SERVICE)[-1]
    user = final.last("USER")
    assert user is not None
    uid = user.args[0].split(":")[0]
    assert uid.isdigit(), "a numeric uid, so Kubernetes can check runAsNonRoot"
    assert int(uid) != 0
    entrypoint = final.last("ENTRYPOINT")
    assert entrypoint is not None
    assert entrypoint.exec_form
    assert entrypoint.args == ["runyard"]
    assert "runyard" in console_scripts()
    cmd = final.last("CMD")
    assert cmd is not None
    assert cmd.exec_form
    assert check_runyard_args(cmd.args) == "api"
    assert dockerfile.env(final)["RUNYARD_HOME"] == "/var/lib/runyard"


def test_service_image_installs_no_dev_dependencies() -> None:
    for stage in _stages(SERVICE):
        for args in _pip_installs(stage):
            assert not any("dev" in arg for arg in args), args


@pytest.mark.parametrize("command", SERVICE_COMMANDS)
def test_runyard_commands_the_images_run_start(command: str) -> None:
    result = subprocess.run(
        [str(venv_script("runyard")), command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"Usage: runyard {command}" in result.stdout


def test_train_console_script_starts_and_names_a_missing_config(tmp_path: Path) -> None:
    # `train` takes no options: it reads the instance's config under SM_BASE_DIR.
    result = subprocess.run(
        [str(venv_script("train"))],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SM_BASE_DIR": str(tmp_path)},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("runyard runtime:")
    assert str(tmp_path) in result.stderr


# -- the wheels the images install -------------------------------------------------------


def _build_wheel(path: Path, stage_index: int, workdir: Path) -> Path:
    """Build the distribution from exactly the files one stage of a Dockerfile copies."""
    context = workdir / "context"
    context.mkdir()
    stage = _stages(path)[stage_index]
    for copy in stage.all("COPY"):
        if "from" in copy.flags:
            continue
        *sources, destination = copy.args
        for source in sources:
            target = context / (source if destination.endswith("/") else destination)
            if (REPO / source).is_dir():
                _copy_tree(REPO / source, target)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes((REPO / source).read_bytes())
    out = workdir / "wheels"
    subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(context)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


def _copy_tree(source: Path, target: Path) -> None:
    ignore = dockerfile.DockerIgnore((REPO / ".dockerignore").read_text())
    for item in source.rglob("*"):
        relative = item.relative_to(REPO).as_posix()
        if item.is_file() and not ignore.excluded(relative):
            destination = target / item.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(item.read_bytes())


def _python_files(package: str) -> set[str]:
    root = REPO / package
    return {
        p.relative_to(REPO).as_posix() for p in root.rglob("*.py") if "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def runtime_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    stages = _stages(RUNTIME)
    index = next(i for i, stage in enumerate(stages) if stage.all("COPY"))
    return _build_wheel(RUNTIME, index, tmp_path_factory.mktemp("runtime-wheel"))


def test_runtime_wheel_holds_the_runtime_and_nothing_else(runtime_wheel: Path) -> None:
    names = set(zipfile.ZipFile(runtime_wheel).namelist())
    packages = {name.split("/")[0] for name in names if not name.startswith("runyard-")}
    # The instance agent, the libraries scripts import, and the one package both import: the
    # contract every part agrees on.
    assert packages == {"runtime", "libraries", "contract"}
    # Every module, the smdistributed compatibility package included.
    assert _python_files("runtime") <= names
    assert _python_files("libraries") <= names
    assert _python_files("contract") <= names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(runtime_wheel).read(entry_points).decode()
    assert "train = runtime.train:main" in text


def test_runtime_needs_nothing_beyond_the_standard_library(
    runtime_wheel: Path, tmp_path: Path
) -> None:
    # A bare interpreter (no site-packages of the test environment), the wheel installed
    # with --no-deps, as the image does: `train` must start and reach its config check.
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [*PIP, "--python", str(python), "install", "-q", "--no-deps", "--no-index", runtime_wheel],
        check=True,
        capture_output=True,
        timeout=120,
    )
    probe = subprocess.run(
        [str(python), "-c", "import fastapi"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert probe.returncode != 0, "the bare interpreter must not see the test environment"
    base = tmp_path / "instance"
    base.mkdir()
    result = subprocess.run(
        [str(env_dir / "bin" / "train")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "SM_BASE_DIR": str(base)},
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("runyard runtime:"), result.stderr


def test_service_wheel_ships_the_migrations_and_the_cli(tmp_path: Path) -> None:
    stages = _stages(SERVICE)
    index = next(
        i
        for i, stage in enumerate(stages)
        if any("pyproject.toml" in copy.args for copy in stage.all("COPY"))
    )
    wheel = _build_wheel(SERVICE, index, tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in (
        "contract",
        "provisioning",
        "service",
        "worker",
        "runtime",
        "libraries",
        "runyard",
        "migrations",
    ):
        assert _python_files(package) <= names, package
    assert "migrations/script.py.mako" in names
    assert any(re.fullmatch(r"migrations/versions/0001_\w+\.py", name) for name in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "runyard = runyard.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
