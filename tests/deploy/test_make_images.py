"""`make images`: the service and training images built with Docker or podman, whichever
is there, under the names the chart runs. Nothing is built here: the tools make calls are
stand-ins on a PATH of their own that write down how they were called."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from tests.deploy.chart import objects_of, pod_spec, workloads
from tests.deploy.support import REPO

MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="needs make")
DOCKERFILES = {"service": "service/Dockerfile", "runtime": "runtime/Dockerfile"}


def _make_images(
    tmp_path: Path, tools: tuple[str, ...], *args: str
) -> subprocess.CompletedProcess[str]:
    """``make images`` with only ``tools`` (stand-ins that log their arguments) and sed
    on its PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sed = shutil.which("sed")
    assert sed is not None
    (bin_dir / "sed").symlink_to(sed)
    for tool in tools:
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{tmp_path}/{tool}.log"\n')
        script.chmod(0o755)
    assert MAKE is not None
    return subprocess.run(
        [MAKE, "--no-print-directory", "-s", "images", *args],
        cwd=REPO,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _builds(log: Path) -> dict[str, list[str]]:
    """Each ``build`` call's argv, by the Dockerfile it names."""
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    assert all(call[0] == "build" for call in calls), calls
    return {call[call.index("-f") + 1]: call for call in calls}


def _tag(call: list[str]) -> str:
    return call[call.index("-t") + 1]


def _normalized(reference: str) -> str:
    """An image reference as Docker, podman's docker.io default and containerd resolve it:
    a name without a registry is on docker.io (a single name under library/)."""
    name, _, tag = reference.rpartition(":")
    first, _, rest = name.partition("/")
    if not rest:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    return f"{name}:{tag}"


def _chart_images(chart: helm.Chart, values: dict[str, Any]) -> dict[str, str]:
    """The images a release runs: the control plane's, and job pods' built-in one."""
    objects = objects_of(chart, values)
    (service,) = {
        container["image"]
        for workload in workloads(objects).values()
        for container in pod_spec(workload)["containers"]
    }
    config = next(
        o for o in objects if o["kind"] == "ConfigMap" and "RUNYARD_KUBERNETES" in o.get("data", {})
    )
    runtime = json.loads(config["data"]["RUNYARD_KUBERNETES"])["image"]
    return {"service": service, "runtime": runtime}


@pytest.mark.parametrize(
    ("tools", "used"),
    [(("docker",), "docker"), (("podman",), "podman"), (("docker", "podman"), "docker")],
)
def test_it_builds_with_the_tool_that_is_there(
    tmp_path: Path, tools: tuple[str, ...], used: str
) -> None:
    done = _make_images(tmp_path, tools)
    assert done.returncode == 0, done.stderr
    builds = _builds(tmp_path / f"{used}.log")
    assert set(builds) == set(DOCKERFILES.values())
    for call in builds.values():
        assert call[-1] == "."  # the repository root, which .dockerignore narrows
    for tool in set(tools) - {used}:
        assert not (tmp_path / f"{tool}.log").exists()


def test_without_docker_or_podman_it_says_so(tmp_path: Path) -> None:
    done = _make_images(tmp_path, ())
    assert done.returncode != 0
    assert "make images needs docker or podman" in done.stderr


def test_the_images_are_the_ones_the_chart_runs(chart: helm.Chart, tmp_path: Path) -> None:
    done = _make_images(tmp_path, ("podman",))
    assert done.returncode == 0, done.stderr
    builds = _builds(tmp_path / "podman.log")
    built = {part: _tag(builds[path]) for part, path in DOCKERFILES.items()}
    # In full, so podman does not file them under localhost/.
    assert all(tag.startswith("docker.io/") for tag in built.values())
    wanted = _chart_images(chart, {})
    assert {part: _normalized(tag) for part, tag in built.items()} == {
        part: _normalized(image) for part, image in wanted.items()
    }
    assert wanted == {"service": "runyard/service:0.1.0", "runtime": "runyard/runtime:0.1.0"}


def test_images_for_a_registry_are_the_ones_its_values_name(
    chart: helm.Chart, tmp_path: Path
) -> None:
    # As docs/deploying.md pushes them and installs the chart with them.
    registry = "registry.example.com/ml/runyard"
    done = _make_images(tmp_path, ("docker",), f"IMAGE_REPOSITORY={registry}")
    assert done.returncode == 0, done.stderr
    builds = _builds(tmp_path / "docker.log")
    page = (REPO / "docs" / "deploying.md").read_text()
    given = dict(re.findall(r"--set (image\.repository|kubernetes\.image)=(\S+)", page))
    assert set(given) == {"image.repository", "kubernetes.image"}
    values = {
        "image": {"repository": given["image.repository"]},
        "kubernetes": {"image": given["kubernetes.image"]},
    }
    shown = {
        part: image.replace("$REGISTRY", registry)
        for part, image in _chart_images(chart, values).items()
    }
    assert shown == {part: _tag(builds[path]) for part, path in DOCKERFILES.items()}
    assert "make images IMAGE_REPOSITORY=$REGISTRY" in page


def test_build_arguments_reach_the_training_image_only(tmp_path: Path) -> None:
    arguments = "--build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126"
    done = _make_images(tmp_path, ("docker",), f"RUNTIME_BUILD_ARGS={arguments}")
    assert done.returncode == 0, done.stderr
    builds = _builds(tmp_path / "docker.log")
    assert "--build-arg" in builds[DOCKERFILES["runtime"]]
    assert "--build-arg" not in builds[DOCKERFILES["service"]]


def test_the_docs_load_what_make_images_builds_into_kind(tmp_path: Path) -> None:
    done = _make_images(tmp_path, ("docker",))
    assert done.returncode == 0, done.stderr
    tags = [_tag(call) for call in _builds(tmp_path / "docker.log").values()]
    page = (REPO / "docs" / "deploying.md").read_text()
    loads = [line for line in page.splitlines() if "kind load" in line or "podman save" in line]
    assert any("kind load docker-image" in line for line in loads)
    assert any("kind load image-archive" in line for line in loads)
    for tag in tags:
        short = tag.removeprefix("docker.io/")
        assert any(tag in line or short in line for line in loads), tag
