"""The local backend and a framework version the package index has no build of for the
image's Python: pip is asked (for real, with the server's pip configuration: here a
directory of wheels alone) once, its answer remembered, and the job runs on the nearest
catalog image, saying so; or, with RUNYARD_IMAGE_FALLBACK=refuse, it is refused."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from contract.images import Catalog, Choice
from provisioning.base import DECIDED_AT_LAUNCH, LaunchError, LaunchRequest
from provisioning.local.backend import LocalBackend
from provisioning.local.images import ImageStore
from provisioning.local.stand_ins import Fallback
from tests.instances import launch_request
from tests.wheels import make_wheel, offline

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
PY = "py" + PYTHON.replace(".", "")
CATALOG = Catalog(python=PYTHON)
# torch 1.12.1 has no build for this Python on the index (a directory holding a torch
# 1.13.1 alone); 1.13.1 has.
MISSING = f"pytorch-training:1.12.1-cpu-{PY}"
PRESENT = f"pytorch-training:1.13.1-cpu-{PY}"
STAND_IN = "pytorch-training:2.13.0-cpu-py311"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("index") / "wheels"
    make_wheel(where, "torch", "1.13.1", "__version__ = '1.13.1'\n")
    return where


@pytest.fixture(autouse=True)
def server_pip(monkeypatch: pytest.MonkeyPatch, wheels: Path) -> None:
    """The server's pip configuration: the directory of wheels, and no index."""
    for name, value in offline(wheels).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIP_CONSTRAINT", "/dev/null")  # not the machine's own, if it has one


def _backend(tmp_path: Path, fallback: Fallback = "nearest") -> LocalBackend:
    return LocalBackend(
        tmp_path / "jobs",
        python=sys.executable,
        allocate_port=lambda: 29500,
        cpus=[0, 1],
        isolation="shared",
        catalog=CATALOG,
        images=ImageStore(tmp_path / "images"),
        image_fallback=fallback,
    )


def _request(tmp_path: Path, image: str, **spec: object) -> LaunchRequest:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text("print('x')\n")
    request = launch_request(source, **spec)
    return replace(request, spec=replace(request.spec, image=Choice(image)))


def _runyard_json(materialized: object) -> dict[str, object]:
    plan = getattr(materialized, "plan")  # noqa: B009 - a LocalPlan
    files = plan.instances[0].files
    loaded: dict[str, object] = json.loads(files["input/config/runyard.json"])
    return loaded


def test_a_version_without_a_build_runs_on_the_nearest_image_saying_why(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    materialized = backend.launch_plan(_request(tmp_path, MISSING))
    note = materialized.image_note
    assert note.startswith(
        f"torch==1.12.1 cannot be installed for Python {PYTHON} from this server's package "
        "index (pip: "
    ), note
    pips = "Could not find a version that satisfies the requirement torch==1.12.1"
    assert f"{pips} (from versions: 1.13.1)" in note
    assert note.endswith(f": the job runs on {STAND_IN}, the nearest image of the catalog")
    assert (materialized.image, materialized.plan.image) == (STAND_IN, STAND_IN)
    config = _runyard_json(materialized)
    # The instances run the stand-in, and the job's log says why first.
    assert config["image"] == STAND_IN
    stand_in = CATALOG.get(STAND_IN)
    assert stand_in is not None
    assert config["image_digest"] == stand_in.digest
    notices = config["notices"]
    assert isinstance(notices, list)
    assert notices[0] == note
    # pip's answer is remembered beside the image store, for a day.
    answer = backend.images.index.remembered("torch==1.12.1", PYTHON)
    assert answer is not None
    assert answer.offered is False


def test_a_version_with_a_build_runs_as_named(tmp_path: Path) -> None:
    materialized = _backend(tmp_path).launch_plan(_request(tmp_path, PRESENT))
    assert (materialized.image, materialized.image_note) == (PRESENT, "")
    config = _runyard_json(materialized)
    assert config["image"] == PRESENT
    assert not any("cannot be installed" in str(n) for n in config["notices"])  # type: ignore[attr-defined]
    answer = ImageStore(tmp_path / "images").index.remembered("torch==1.13.1", PYTHON)
    assert answer is not None
    assert answer.offered is True
    assert "torch-1.13.1-py3-none-any.whl" in answer.words


def test_the_catalogs_own_images_and_the_builtin_one_need_no_answer(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    for image in (STAND_IN, "builtin"):
        materialized = backend.launch_plan(_request(tmp_path, image))
        assert (materialized.image, materialized.image_note) == (image, "")
    assert not (tmp_path / "images" / "offers").exists()


def test_refused_where_the_operator_says_at_launch_then_at_submission(tmp_path: Path) -> None:
    backend = _backend(tmp_path, "refuse")
    request = _request(tmp_path, MISSING, framework_version="1.12")
    # Nothing known yet: the submission is taken, and pip is not asked for it.
    assert backend.check(request.spec, "http://127.0.0.1:1") == []
    assert not (tmp_path / "images" / "offers").exists()
    with pytest.raises(LaunchError) as caught:
        backend.launch_plan(request)
    assert str(caught.value).startswith(f"torch==1.12.1 cannot be installed for Python {PYTHON}")
    assert str(caught.value).endswith(
        "; this server runs no other image in its place (RUNYARD_IMAGE_FALLBACK=refuse)"
    )
    # Now pip has said: a job that names it is refused at submission, naming its field.
    (problem,) = backend.check(request.spec, "http://127.0.0.1:1")
    assert problem.loc == ("framework_version",)
    assert "(RUNYARD_IMAGE_FALLBACK=refuse)" in problem.message
    by_name = _request(tmp_path, MISSING, image_uri=f"pytorch-training:1.12.1-cpu-{PY}")
    (problem,) = backend.check(by_name.spec, "http://127.0.0.1:1")
    assert problem.loc == ("image_uri",)
    # Taking a stand-in, the same server takes it.
    assert _backend(tmp_path).check(request.spec, "http://127.0.0.1:1") == []


def test_no_answer_from_pip_builds_the_version_as_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip that cannot be run, or takes too long, says nothing: the build will say."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here"))
    backend = _backend(tmp_path)
    materialized = backend.launch_plan(_request(tmp_path, MISSING))
    assert (materialized.image, materialized.image_note) == (MISSING, "")
    assert backend.images.index.remembered("torch==1.12.1", PYTHON) is None


@pytest.mark.parametrize("fallback", ["nearest", "refuse"])
def test_a_dry_run_asks_pip_nothing_and_shows_the_image_as_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fallback: Fallback
) -> None:
    """Planning is no launch: pip is not run (here it could not be), nothing is
    remembered, and the plan says what the launch will decide of the image."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here"))
    backend = _backend(tmp_path, fallback)
    materialized = backend.materialize(_request(tmp_path, MISSING, framework_version="1.12"))
    assert (materialized.image, materialized.image_note) == (MISSING, "")
    otherwise = {
        "nearest": f"the job runs on {STAND_IN}, the nearest image of the catalog",
        "refuse": "the job is refused then",
    }[fallback]
    assert materialized.public["image"] == MISSING
    assert materialized.public["image_note"] == (
        f"{DECIDED_AT_LAUNCH}: whether this server's package index has torch==1.12.1 for "
        f"Python {PYTHON} (pip is asked); where it has not, {otherwise}"
    )
    config = _runyard_json(materialized)
    assert config["image"] == MISSING
    assert not any("cannot be installed" in str(n) for n in config["notices"])  # type: ignore[attr-defined]
    assert not (tmp_path / "images" / "offers").exists()


def test_a_relaunch_keeps_the_image_its_first_launch_decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip's answer changes after the first launch (torch 1.12.1 appears on the index):
    adopting the job's instances, or restarting it after its teardown, keeps the stand-in
    the first launch ran on."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "torch", "1.13.1", "__version__ = '1.13.1'\n")
    for name, value in offline(wheels).items():
        monkeypatch.setenv(name, value)
    backend = _backend(tmp_path)
    request = _request(tmp_path, MISSING)
    first = backend.launch_plan(request)
    assert first.image == STAND_IN
    # What the first launch left for a later one to adopt (as ``apply`` writes it; its
    # instances need not run for that).
    job_dir = Path(first.plan.job_dir)
    job_dir.mkdir(parents=True)
    (job_dir / "plan.json").write_text(json.dumps(first.public))
    make_wheel(wheels, "torch", "1.12.1", "__version__ = '1.12.1'\n")
    backend.images.index.forget()
    # The worker adopting the job (after its own restart): the plan it left.
    adopted = backend.launch_plan(request)
    assert (adopted.image, adopted.image_note) == (STAND_IN, first.image_note)
    backend.teardown(request.job)
    # A restart: the teardown took the plan, the job's record keeps what was launched.
    restarted = backend.launch_plan(
        replace(request, launched_image=first.image, launched_image_note=first.image_note)
    )
    assert (restarted.image, restarted.image_note) == (STAND_IN, first.image_note)
    config = _runyard_json(restarted)
    assert config["image"] == STAND_IN
    assert config["notices"][0] == first.image_note  # type: ignore[index]
    # Deciding anew, pip would now say the version has a build.
    assert backend.launch_plan(request).image == MISSING
