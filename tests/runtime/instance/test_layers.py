"""The job's layers above its image (runtime.instance.layers), for real: virtual
environments, pip, and packages from wheels made here. The image is a throwaway virtual
environment holding a package named ``torch`` (version 1.0), never the suite's own."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runtime.instance import layers
from runtime.instance.install import InstallError
from tests.wheels import make_wheel, offline


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake torch 1.0 (for the image) and 1.99 (a job's pin; both below the torch cap this
    machine's pip configuration may hold), and a package to add."""
    where = tmp_path_factory.mktemp("wheels") / "wheels"
    make_wheel(where, "torch", "1.0", "__version__ = '1.0'\n")
    make_wheel(where, "torch", "1.99", "__version__ = '1.99'\n")
    make_wheel(where, "extra_tool", "1.99", "VALUE = 'extra'\n")
    return where


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory, wheels: Path) -> layers.PythonEnvironment:
    """An image: a virtual environment of its own, with pip and torch 1.0."""
    root = tmp_path_factory.mktemp("image") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    python = root / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
         str(wheels), "torch==1.0"],
        check=True,
    )  # fmt: skip
    return layers.image(str(python))


def _code(tmp_path: Path, requirements: str) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "requirements.txt").write_text(requirements)
    return code


def _run(python: str, source: str) -> str:
    # Not from the checkout, whose packages `python -c` would import from its directory.
    return subprocess.run(
        [python, "-c", source], check=True, capture_output=True, text=True, cwd="/"
    ).stdout.strip()


def _torch(python: str) -> str:
    return _run(python, "import torch; print(torch.__version__)")


def test_a_pin_is_installed_in_the_job_layer_and_the_image_keeps_its_own(
    tmp_path: Path, image: layers.PythonEnvironment, wheels: Path
) -> None:
    said: list[str] = []
    job = layers.job_layer(
        tmp_path / "job-env",
        image,
        _code(tmp_path, "torch==1.99\n"),
        offline(wheels),
        said.append,
    )
    instance = layers.instance_layer(tmp_path / "algo-1", job)
    assert _torch(instance.python) == "1.99"
    assert _torch(job.python) == "1.99"
    # pip saw the image's torch, and left it where it is.
    assert any("outside environment" in line for line in said), said
    assert _torch(image.python) == "1.0"
    assert "torch-1.0.dist-info" in {p.name for p in Path(image.search[0]).iterdir()}
    # The layers' own site directories come first, then the image's.
    search = json.loads(_run(instance.python, "import json, sys; print(json.dumps(sys.path))"))
    order = [search.index(site) for site in (*instance.search[:2], image.search[0])]
    assert order == sorted(order)


def test_the_instances_of_a_job_install_once_and_share_it(
    tmp_path: Path, image: layers.PythonEnvironment, wheels: Path
) -> None:
    code = _code(tmp_path, "torch==1.99\n")
    said: dict[str, list[str]] = {"algo-1": [], "algo-2": []}
    made: dict[str, layers.PythonEnvironment] = {}

    def start(host: str) -> None:
        env = {**offline(wheels), "RUNYARD_HOST": host}
        job = layers.job_layer(tmp_path / "job-env", image, code, env, said[host].append)
        made[host] = layers.instance_layer(tmp_path / host, job)

    threads = [threading.Thread(target=start, args=(host,)) for host in said]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    installs = [host for host, lines in said.items() if "Installing requirements.txt" in lines]
    assert len(installs) == 1, said
    (other,) = set(said) - set(installs)
    assert said[other] == [f"The job's packages were installed by {installs[0]}"]
    assert {_torch(made[host].python) for host in said} == {"1.99"}


def test_a_failed_install_fails_every_instance_with_pips_words(
    tmp_path: Path, image: layers.PythonEnvironment, wheels: Path
) -> None:
    code = _code(tmp_path, "no-such-package==1.0\n")
    with pytest.raises(InstallError, match="no-such-package") as first:
        layers.job_layer(tmp_path / "job-env", image, code, offline(wheels), lambda _: None)
    said: list[str] = []
    with pytest.raises(InstallError) as second:
        layers.job_layer(tmp_path / "job-env", image, code, offline(wheels), said.append)
    assert str(second.value) == str(first.value)
    assert said == []  # pip did not run again


def test_a_version_that_does_not_exist_is_named_with_pips_error_line(
    tmp_path: Path, image: layers.PythonEnvironment, wheels: Path
) -> None:
    code = _code(tmp_path, "extra_tool==9.9\n")  # the index has 1.99 only
    with pytest.raises(InstallError) as failed:
        layers.job_layer(tmp_path / "job-env", image, code, offline(wheels), lambda _: None)
    assert str(failed.value) == (
        "pip could not install requirements.txt: ERROR: Could not find a version that "
        "satisfies the requirement extra_tool==9.9 (from versions: 1.99) | "
        "ERROR: No matching distribution found for extra_tool==9.9"
    )


# A package whose build fails, as one needing a compiler the image lacks: its build
# backend is its own (nothing to download), and says why it cannot build.
BROKEN_BACKEND = """\
def get_requires_for_build_wheel(config_settings=None):
    print("building broken-package 1.0")
    raise SystemExit("error: broken-package needs a C compiler, and there is none")
"""


def test_a_package_that_cannot_be_built_is_named_with_what_its_build_said(
    tmp_path: Path, image: layers.PythonEnvironment, wheels: Path
) -> None:
    code = _code(tmp_path, "./broken\n")
    package = code / "broken"
    package.mkdir()
    (package / "backend.py").write_text(BROKEN_BACKEND)
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    )
    said: list[str] = []
    with pytest.raises(InstallError) as failed:
        layers.job_layer(tmp_path / "job-env", image, code, offline(wheels), said.append)
    # pip itself says only "See above for output": the reason says what was above.
    assert any("See above for output" in line for line in said), said
    assert str(failed.value) == (
        "pip could not install requirements.txt: ./broken: Getting requirements to build "
        "wheel did not run successfully (exit code: 1): building broken-package 1.0 / "
        "error: broken-package needs a C compiler, and there is none"
    )


def test_what_a_script_installs_stays_in_its_instance(
    tmp_path: Path, image: layers.PythonEnvironment, wheels: Path
) -> None:
    code = _code(tmp_path, "")
    job = layers.job_layer(tmp_path / "job-env", image, code, offline(wheels), lambda _: None)
    first = layers.instance_layer(tmp_path / "algo-1", job)
    second = layers.instance_layer(tmp_path / "algo-2", job)
    # As a script would, with the `pip` it finds first on its PATH.
    pip = Path(first.bin_dirs[0]) / "pip"
    assert pip.read_text().startswith(f"#!{first.python}\n")
    env = layers.layer_environment(first, {**offline(wheels), "PATH": "/usr/bin:/bin"})
    subprocess.run(["pip", "install", "--quiet", "extra_tool"], check=True, env=env)
    probe = "import importlib.util as u; print(u.find_spec('extra_tool') is not None)"
    assert _run(first.python, probe) == "True"
    assert _run(second.python, probe) == "False"
    assert _run(job.python, probe) == "False"
    assert _run(image.python, probe) == "False"


def test_offered_packages_are_importable_in_an_image_without_them(
    tmp_path: Path, image: layers.PythonEnvironment, wheels: Path
) -> None:
    job = layers.job_layer(
        tmp_path / "job-env",
        image,
        _code(tmp_path, ""),
        offline(wheels),
        lambda _: None,
        offered=[Path(layers.__file__).parents[2] / "contract"],
    )
    instance = layers.instance_layer(tmp_path / "algo-1", job)
    assert _run(instance.python, "import contract.images; print(contract.images.BUILTIN)") == (
        "builtin"
    )
    assert _run(image.python, "import importlib.util as u; print(u.find_spec('contract'))") == (
        "None"
    )


def test_a_pip_in_the_jobs_code_is_not_the_pip_that_installs(
    tmp_path: Path, image: layers.PythonEnvironment, wheels: Path
) -> None:
    """The code directory is pip's working directory; the runtime's pip is the layer's
    own, never a ``pip`` package the job's code holds."""
    code = _code(tmp_path, "torch==1.99\n")
    (code / "pip").mkdir()
    (code / "pip" / "__init__.py").write_text("")
    marker = tmp_path / "hijacked"
    (code / "pip" / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    job = layers.job_layer(tmp_path / "job-env", image, code, offline(wheels), lambda _: None)
    assert _torch(job.python) == "1.99"
    assert not marker.exists()
