"""What a job installs never reaches the server or another job, on both isolation modes;
catalog images are built on first use, shared, and fail a job with pip's words.

Through the real service, worker and local backend. The server runs from a throwaway
virtual environment above the suite's ``.venv`` holding a package named ``torch`` of its
own (version 1.0), so a job that replaced the server's torch could only break that one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from provisioning.local.images import ImageStore
from runyard.client import Client
from tests.e2e.conftest import Stack
from tests.venvs import above_this_venv
from tests.wheels import make_wheel, offline

pytestmark = pytest.mark.e2e

# A job that pins another torch than the server's, and tries to write where the server's
# packages are; it waits (up to two minutes) until the plain job has run beside it, which
# the test tells it in its own base directory (jobs see no place they share).
PINNED = """
import argparse, errno, os, sys, time, torch
parser = argparse.ArgumentParser()
parser.add_argument("--server-site")
args = parser.parse_args()
print("torch", torch.__version__, "from", torch.__file__, flush=True)
try:
    open(os.path.join(args.server_site, "written-by-a-job"), "w").close()
    print("server site: written", flush=True)
except OSError as exc:
    print("server site:", errno.errorcode[exc.errno], flush=True)
for _ in range(1200):
    if os.path.exists(os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "plain-ran")):
        break
    time.sleep(0.1)
else:
    sys.exit("the plain job never ran beside this one")
"""
PLAIN = """
import torch
print("torch", torch.__version__, flush=True)
"""
PROBE = """
import json, sys, runyard_probe, runtime, libraries
print("probe " + json.dumps({"prefix": sys.prefix, "value": runyard_probe.VALUE,
                             "runtime": runtime.__file__,
                             "libraries": libraries.__file__}), flush=True)
"""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("wheels") / "wheels"
    make_wheel(where, "torch", "1.0", "__version__ = '1.0'\n")
    make_wheel(where, "torch", "1.99", "__version__ = '1.99'\n")
    make_wheel(where, "runyard_probe", "1.0", "VALUE = 'probe'\n")
    return where


@pytest.fixture(scope="module")
def server_python(tmp_path_factory: pytest.TempPathFactory, wheels: Path) -> Path:
    """A virtual environment above the suite's, with a torch 1.0 of its own."""
    root = tmp_path_factory.mktemp("server-env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = above_this_venv(python)
    (wheel,) = wheels.glob("torch-1.0-*.whl")
    with zipfile.ZipFile(wheel) as archive:  # a pure wheel installs by unpacking
        archive.extractall(site)
    return python


def _ask(python: Path, code: str) -> str:
    return subprocess.run(
        [str(python), "-c", code], check=True, capture_output=True, text=True, cwd="/"
    ).stdout.strip()


def _torch_of(python: Path) -> str:
    return _ask(python, "import torch; print(torch.__version__)")


def _site_of(python: Path) -> str:
    return _ask(python, "import torch, os; print(os.path.dirname(torch.__path__[0]))")


@pytest.fixture(scope="module", params=["namespaces", "shared"])
def env_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, server_python: Path
) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp(f"runyard-{request.param}")
    stack = Stack(
        home,
        f"sqlite:///{home / 'runyard.db'}",
        f"sqla+sqlite:///{home / 'broker.db'}",
        python=str(server_python),
    )
    stack.env["RUNYARD_LOCAL_ISOLATION"] = request.param
    yield stack.up()
    assert stack.down() == [], "processes of finished jobs were left running"


def _source(root: Path, name: str, files: dict[str, str]) -> Path:
    source = root / name
    source.mkdir(parents=True)
    for file, text in files.items():
        (source / file).write_text(textwrap.dedent(text))
    return source


def _host_lines(client: Client, name: str) -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {}
    for event in client.logs(name):
        if "message" in event:
            lines.setdefault(str(event["host"]), []).append(str(event["message"]))
    return lines


def test_a_jobs_torch_pin_changes_neither_the_server_nor_a_job_beside_it(
    env_stack: Stack, server_python: Path, wheels: Path, tmp_path: Path
) -> None:
    isolation = env_stack.env["RUNYARD_LOCAL_ISOLATION"]
    server_site = _site_of(server_python)
    pinned = _source(tmp_path, "pinned", {"train.py": PINNED, "requirements.txt": "torch==1.99\n"})
    plain = _source(tmp_path, "plain", {"train.py": PLAIN})
    with env_stack.client() as client:
        first = env_stack.submit(
            client,
            pinned,
            name="pinned",
            entry_point="train.py",
            instance_count=2,
            hyperparameters={"server-site": server_site},
            # The job's own environment reaches its install, as on SageMaker.
            environment=offline(wheels),
        )
        env_stack.wait_for(
            client, "pinned", lambda job: job["secondary_status"] == "Training", timeout=120
        )
        second = env_stack.submit(client, plain, name="plain", entry_point="train.py")
        jobs = {"plain": env_stack.wait_until_ended(client, second["name"], timeout=180)}
        for host in ("algo-1", "algo-2"):  # the pinned job's instances, still running
            (env_stack.home / "jobs" / first["id"] / host / "plain-ran").touch()
        jobs["pinned"] = env_stack.wait_until_ended(client, first["name"], timeout=180)
        for name, job in jobs.items():
            assert job["status"] == "Completed", env_stack.explain(job, list(client.logs(name)))
        pinned_lines = _host_lines(client, "pinned")
        plain_lines = _host_lines(client, "plain")

    # The job ran on its pin; the job beside it and the server kept theirs.
    for host in ("algo-1", "algo-2"):
        assert any(line.startswith("torch 1.99 from") for line in pinned_lines[host])
    assert "torch 1.0" in plain_lines["algo-1"]
    assert _torch_of(server_python) == "1.0"
    assert _torch_of(Path(sys.executable)) == version("torch")  # the suite's own, untouched
    assert (Path(server_site) / "torch-1.0.dist-info").is_dir()
    # Installed once for the job's two instances, leaving the server's torch where it is.
    everything = [line for lines in pinned_lines.values() for line in lines]
    assert everything.count("Installing requirements.txt") == 1
    assert any("Not uninstalling torch" in line for line in everything), everything
    assert sum(line.startswith("The job's packages were installed by") for line in everything) == 1
    # With namespaces, the server's environment is read-only to the job; where instances
    # share the machine, nothing but pip's own rule keeps a job from writing there.
    if isolation == "namespaces":
        assert "server site: EROFS" in pinned_lines["algo-1"]
        assert not (Path(server_site) / "written-by-a-job").exists()
    else:
        (Path(server_site) / "written-by-a-job").unlink(missing_ok=True)


@pytest.fixture(scope="module")
def image_stack(tmp_path_factory: pytest.TempPathFactory, wheels: Path) -> Iterator[Stack]:
    """A server with two images of its own in its catalog, which it builds from a
    directory of wheels: one it can build, and one whose package is nowhere."""
    home = tmp_path_factory.mktemp("runyard-images")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'b.db'}")
    tiny = {"framework": "pytorch", "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    stack.env["RUNYARD_IMAGES"] = json.dumps(
        [
            {**tiny, "framework_version": "0.1.0", "packages": ["runyard_probe==1.0"]},
            {**tiny, "framework_version": "0.2.0", "packages": ["runyard_missing==9"]},
        ]
    )
    stack.env.update(offline(wheels))  # the server's pip configuration, for its builds
    yield stack.up()
    assert stack.down() == [], "processes of finished jobs were left running"


def test_a_catalog_image_is_built_on_first_use_and_shared_after(
    image_stack: Stack, tmp_path: Path
) -> None:
    source = _source(tmp_path, "probe", {"train.py": PROBE})
    with image_stack.client() as client:
        runs = []
        for name in ("first-use", "second-use"):
            image_stack.submit(
                client, source, name=name, entry_point="train.py", framework_version="0.1"
            )
            job = image_stack.wait_until_ended(client, name, timeout=300)
            assert job["status"] == "Completed", image_stack.explain(job, list(client.logs(name)))
            assert job["image"] == "pytorch-training:0.1.0-cpu-py311"
            runs.append(_host_lines(client, name)["algo-1"])
    first, second = runs
    assert any(line.startswith("Waiting for the image pytorch-training:0.1.0") for line in first)
    assert any(line.startswith("[image build] Successfully installed runyard") for line in first)
    assert not any("Waiting for the image" in line for line in second)
    (probe,) = [json.loads(line[6:]) for line in second if line.startswith("probe ")]
    assert probe["value"] == "probe"
    # The job ran in its instance's layer above the image, with Runyard's runtime and the
    # libraries its scripts import offered.
    assert probe["prefix"].endswith("/.runyard/env")
    assert probe["runtime"].endswith("/runtime/__init__.py")
    assert probe["libraries"].endswith("/libraries/__init__.py")
    store = ImageStore(image_stack.home / "images")
    (digest,) = store.digests()
    environment = store.root / digest
    assert not environment.stat().st_mode & 0o222  # read-only once built


def test_an_image_that_cannot_be_built_fails_the_job_with_pips_words(
    image_stack: Stack, tmp_path: Path
) -> None:
    source = _source(tmp_path, "missing", {"train.py": "print('never runs')\n"})
    with image_stack.client() as client:
        image_stack.submit(
            client, source, name="no-image", entry_point="train.py", framework_version="0.2"
        )
        job = image_stack.wait_until_ended(client, "no-image", timeout=300)
    assert job["status"] == "Failed"
    reason = job["failure_reason"]
    assert reason.startswith(
        "ClientError: the image pytorch-training:0.2.0-cpu-py311 could not be built: "
    ), reason
    assert "No matching distribution found for runyard_missing==9" in reason


def _images(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runyard", "images", *args],
        env=stack.env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_images_command_builds_lists_and_prunes_the_store(image_stack: Stack) -> None:
    built = _images(image_stack, "build", "pytorch-training:0.1.0-cpu-py311")
    assert built.returncode == 0, built.stderr
    assert "pytorch-training:0.1.0-cpu-py311 is ready: " in built.stdout
    failed = _images(image_stack, "build", "pytorch-training:0.2.0-cpu-py311")
    assert failed.returncode == 1
    assert "error: pytorch-training:0.2.0-cpu-py311 could not be built: " in failed.stderr
    assert "runyard_missing==9" in failed.stderr
    unknown = _images(image_stack, "build", "pytorch:9")
    assert unknown.returncode == 2
    assert "'pytorch:9' is no image of the catalog" in unknown.stderr
    listed = _images(image_stack, "list").stdout
    rows = {line.split()[0]: line for line in listed.splitlines()[1:]}
    assert " ready " in rows["builtin"]
    assert " built " in rows["pytorch-training:0.1.0-cpu-py311"]
    assert "failed (runyard images build shows why)" in rows["pytorch-training:0.2.0-cpu-py311"]
    assert " not built " in rows["pytorch-training:2.13.0-cpu-py311"]
    pruned = _images(image_stack, "prune", "--all")
    assert pruned.stdout.rstrip().endswith("image(s) removed"), pruned
    assert ImageStore(image_stack.home / "images").digests() == []
