"""Which image a job runs on: chosen at submission from its fields and the server's image
catalog (contract.images), refused naming the field when none matches, and shown by
describe, over REST and over SageMaker's wire protocol."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract.images import Catalog, ImageError, parse_dlc
from runyard.server import prepare
from service.app import create_app
from service.settings import Settings
from tests.conftest import job_spec, make_settings

DLC = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training"
SKLEARN = "246618743249.dkr.ecr.us-west-2.amazonaws.com/sagemaker-scikit-learn"
PT213 = "pytorch-training:2.13.0-cpu-py311"
TF220 = "tensorflow-training:2.20.0-cpu-py311"
FV = "framework_version"
TINY = {
    "framework": "pytorch",
    "framework_version": "0.1.0",
    "python": "3.11",
    "packages": ["runyard-probe==1.0"],
    "aliases": ["probe"],
}


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return make_settings(
        tmp_path / "home",
        database_url,
        images=[TINY],
        image_aliases={"pytorch-training:2.1.0-cpu-py310": "builtin", "pytorch:2.3": "builtin"},
    )


def _create(api: TestClient, source_dir: Path, **fields: Any) -> Any:
    return api.post("/v1/training-jobs", json=job_spec(source_dir, **fields))


@pytest.mark.parametrize(
    ("fields", "image"),
    [
        ({}, "builtin"),
        ({"py_version": "py311"}, "builtin"),
        ({FV: "2.13"}, PT213),
        ({FV: "2.13.0", "py_version": "py311"}, PT213),
        ({"framework": "tensorflow", FV: "2"}, TF220),
        ({"image_uri": "pytorch:2.13"}, PT213),
        ({"image_uri": f"{DLC}:2.13.0-cpu-py311-ubuntu22.04-sagemaker"}, PT213),
        ({"image_uri": "probe"}, "pytorch-training:0.1.0-cpu-py311"),
        ({FV: "0.1"}, "pytorch-training:0.1.0-cpu-py311"),
        # An operator's alias: the Deep Learning Container a team's code names, whole or
        # without its registry.
        ({"image_uri": f"{DLC}:2.1.0-cpu-py310"}, "builtin"),
        ({"image_uri": "pytorch-training:2.1.0-cpu-py310"}, "builtin"),
        # ... or the framework version, however precisely it is named.
        ({FV: "2.3"}, "builtin"),
        ({FV: "2.3.0", "py_version": "py311"}, "builtin"),
        ({"image_uri": f"{DLC}:2.3.0-cpu-py311"}, "builtin"),
        # A version SageMaker has images of, which the catalog makes for this server's
        # Python: by the SDK's short form, in full, or by its images' names (the SDK v3's
        # ModelTrainer tests name this one).
        ({FV: "2.1"}, "pytorch-training:2.1.0-cpu-py311"),
        ({FV: "2.0.0", "py_version": "py310"}, "pytorch-training:2.0.0-cpu-py311"),
        ({"image_uri": f"{DLC.replace('us-east-1', 'us-west-2')}:2.0.0-cpu-py310"},
         "pytorch-training:2.0.0-cpu-py311"),
        ({"image_uri": "sagemaker-pytorch:1.0.0-cpu-py3"}, "pytorch-training:1.0.0-cpu-py311"),
        ({"framework": "tensorflow", FV: "2.16"}, "tensorflow-training:2.16.2-cpu-py311"),
        ({"image_uri": "sagemaker-tensorflow-scriptmode:1.12.0-gpu-py3"},
         "tensorflow-training:1.12.0-gpu-py311"),
        # scikit-learn: its images' versions, the catalog's own or made here.
        ({"framework": "sklearn", FV: "1.4-2", "py_version": "py3"},
         "sagemaker-scikit-learn:1.4-2-cpu-py311"),
        ({"framework": "sklearn", FV: "1.2-1"}, "sagemaker-scikit-learn:1.2-1-cpu-py311"),
        ({"image_uri": f"{SKLEARN}:1.2-1-cpu-py3"}, "sagemaker-scikit-learn:1.2-1-cpu-py311"),
        ({"image_uri": f"{SKLEARN}:0.20.0-cpu-py3", FV: "0.20.0"},
         "sagemaker-scikit-learn:0.20.0-cpu-py311"),
    ],
)  # fmt: skip
def test_the_job_runs_on_the_image_its_fields_name(
    api: TestClient, source_dir: Path, fields: dict[str, Any], image: str
) -> None:
    response = _create(api, source_dir, **fields)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["image"] == image
    assert (job["spec"]["image"]["name"], job["spec"]["image"]["container"]) == (image, None)
    assert api.get("/v1/training-jobs/job-1").json()["image"] == image


def test_describe_says_what_the_fields_named_and_how_the_image_differs(
    api: TestClient, source_dir: Path
) -> None:
    named = _create(api, source_dir, framework_version="2.1", py_version="py310").json()
    assert named["image_requested"] == "pytorch 2.1 (py310)"
    assert named["image_note"] == (
        "py310 was asked for; the image of pytorch 2.1.0 is made for this server's Python, 3.11"
    )
    exact = _create(api, source_dir, name="job-2", image_uri=f"{DLC}:2.1.0-cpu-py311").json()
    assert exact["image_requested"] == f"{DLC}:2.1.0-cpu-py311"
    assert exact["image_note"] is None
    plain = _create(api, source_dir, name="job-3").json()
    assert (plain["image"], plain["image_requested"], plain["image_note"]) == (
        "builtin",
        None,
        None,
    )


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({FV: "2.9"}, FV, "has no pytorch 2.9; it has: pytorch 2.13.0"),
        ({FV: "2.9"}, FV, "and SageMaker's versions 0.4, 1.0, 1.1,"),
        ({"framework": "sklearn", FV: "1.3-1"}, FV,
         "has no sklearn 1.3-1; it has: sklearn 1.4-2 (py311), and SageMaker's versions 0.20.0"),
        ({"framework": "sklearn", FV: "1.2"}, FV, "has no sklearn 1.2;"),
        ({FV: "2.13", "py_version": "py39"}, FV, "no pytorch 2.13 (py39)"),
        ({FV: "two"}, FV, "not a version number"),
        ({"py_version": "python3"}, "py_version", "not a Python version"),
        ({"image_uri": f"{DLC}:1.8.2-cpu-py36"}, "image_uri", "has no pytorch 1.8.2 (py36)"),
        ({"image_uri": f"{SKLEARN}:1.2-1-cpu-py3", FV: "1.4-2"}, FV, "disagrees with image_uri"),
        ({"image_uri": "Not An Image!"}, "image_uri", "nor an OCI image reference"),
        ({"image_uri": "pytorch:2.13", FV: "2.14"}, FV, "disagrees with image_uri"),
        ({"image": {"name": "builtin"}}, "image", "is set by the server"),
    ],
)  # fmt: skip
def test_an_image_no_catalog_entry_matches_is_refused_naming_the_field(
    api: TestClient, source_dir: Path, fields: dict[str, Any], field: str, words: str
) -> None:
    response = _create(api, source_dir, **fields)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", field]
    assert words in error["msg"]
    assert api.get("/v1/training-jobs").json()["items"] == []


@pytest.mark.container_engine
def test_a_custom_container_brings_its_own_program_and_a_script_needs_its_source(
    api: TestClient, source_dir: Path
) -> None:
    container = "registry.example.com/team/train:1"
    spec = {k: v for k, v in job_spec(source_dir).items() if k not in ("entry_point", "source_uri")}
    created = api.post("/v1/training-jobs", json={**spec, "image_uri": container})
    assert created.status_code == 201, created.text
    assert created.json()["image"] == container
    assert created.json()["spec"]["image"] == {
        "name": "builtin",
        "container": container,
        "note": None,
    }
    refused = api.post("/v1/training-jobs", json={**spec, "name": "job-2"})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "entry_point"]


@pytest.mark.parametrize(
    ("engine", "words"),
    [
        ("no-such-engine --flag", "RUNYARD_CONTAINER_ENGINE names 'no-such-engine --flag'"),
        ("auto", "no container engine on the worker's machine: install podman"),
    ],
)
def test_a_custom_container_where_no_engine_exists_is_refused_saying_what_to_install(
    tmp_path: Path,
    database_url: str,
    source_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    engine: str,
    words: str,
) -> None:
    from provisioning.local import containers

    monkeypatch.setenv("PATH", str(tmp_path / "an-empty-directory"))
    containers.find.cache_clear()
    settings = make_settings(tmp_path / "home", database_url, container_engine=engine)
    try:
        with TestClient(create_app(settings)) as api:
            api.headers["Authorization"] = f"Bearer {prepare(settings)}"
            response = _create(api, source_dir, image_uri="registry.example.com/team/train:1")
    finally:
        containers.find.cache_clear()
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "image_uri"]
    assert "is a container image, which needs a container engine" in error["msg"]
    assert words in error["msg"]


def test_a_catalog_with_a_name_twice_or_an_alias_of_nothing_stops_the_server(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="RUNYARD_IMAGES: the image name 'probe' is given twice"):
        make_settings(tmp_path, "sqlite://", images=[TINY, {**TINY, "framework_version": "0.2"}])
    with pytest.raises(ValueError, match="names 'nothing-here', which is no image"):
        make_settings(tmp_path, "sqlite://", image_aliases={"x:1": "nothing-here"})
    with pytest.raises(ValueError, match="packages"):
        make_settings(tmp_path, "sqlite://", images=[{**TINY, "packages": ["--index-url=x"]}])


def test_describe_over_the_wire_names_the_image_a_rest_job_runs(
    tmp_path: Path, database_url: str, source_dir: Path
) -> None:
    from tests.service.sagemaker.conftest import credentials
    from tests.service.sagemaker.live import client, serving

    settings = make_settings(tmp_path / "home", database_url)
    token = prepare(settings)
    app = create_app(settings)
    with TestClient(app) as api, serving(app) as url:
        api.headers["Authorization"] = f"Bearer {token}"
        assert _create(api, source_dir, framework_version="2.13").status_code == 201
        sm = client("sagemaker", url, credentials(api))
        described = sm.describe_training_job(TrainingJobName="job-1")
    assert described["AlgorithmSpecification"]["TrainingImage"] == (
        "pytorch-training:2.13.0-cpu-py311"
    )


def test_deep_learning_container_names_are_read_for_framework_version_and_python() -> None:
    assert parse_dlc(f"{DLC}:2.13.0-cpu-py311-ubuntu22.04-sagemaker") == (
        "pytorch",
        "2.13.0",
        "py311",
        "cpu",
    )
    hugging_face = "huggingface-pytorch-training:2.1.0-transformers4.36.0-gpu-py310-cu121"
    assert parse_dlc(hugging_face) == ("pytorch", "2.1.0", "py310", "gpu")
    assert parse_dlc("tensorflow-training:2.16-cpu") == ("tensorflow", "2.16", None, "cpu")
    assert parse_dlc(f"{SKLEARN}:1.2-1-cpu-py3") == ("sklearn", "1.2-1", "py3", "cpu")
    assert parse_dlc("sagemaker-scikit-learn:0.20.0-cpu-py3") == ("sklearn", "0.20.0", "py3", "cpu")
    assert parse_dlc("my/own:1") is None
    with pytest.raises(ImageError) as caught:
        Catalog().choose(framework="pytorch", framework_version=None, py_version=None,
                         image_uri="huggingface-pytorch-training:2.1.7-gpu-py310")  # fmt: skip
    assert caught.value.field == "image_uri"


def test_a_version_pip_has_no_build_of_is_refused_where_the_operator_says(
    tmp_path: Path, database_url: str, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With RUNYARD_IMAGE_FALLBACK=refuse, once pip has said (at an earlier job's launch)
    that the index has no torch 1.12.1 for this Python, a job naming it is refused at
    submission; another SageMaker version, not asked about yet, is taken."""
    from provisioning.local import image_store
    from tests.wheels import offline

    for name, value in offline(tmp_path / "no-wheels").items():
        monkeypatch.setenv(name, value)  # the server's pip: an index without torch
    settings = make_settings(tmp_path / "home", database_url, image_fallback="refuse")
    python = settings.catalog.python
    answer = image_store(settings).index.offers("torch==1.12.1", python, sys.executable)
    assert answer.offered is False
    with TestClient(create_app(settings)) as api:
        api.headers["Authorization"] = f"Bearer {prepare(settings)}"
        refused = _create(api, source_dir, framework_version="1.12")
        taken = _create(api, source_dir, name="job-2", framework_version="1.13")
    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["detail"]
    assert error["loc"] == ["body", "framework_version"]
    assert error["msg"].startswith(f"torch==1.12.1 cannot be installed for Python {python} ")
    assert error["msg"].endswith("(RUNYARD_IMAGE_FALLBACK=refuse)")
    assert taken.status_code == 201, taken.text
