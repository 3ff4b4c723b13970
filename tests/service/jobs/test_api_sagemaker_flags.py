"""A distribution named in hyperparameters, as the SageMaker SDK writes it and SageMaker's
containers read it, on Runyard's own API: the job runs under it, a ``distribution`` that
agrees is kept, one that disagrees is a 422 naming both, and a bad flag names itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.jobs.record import JobRecord
from service.jobs.schemas import JobCreate
from tests.conftest import job_spec

MPI_FLAGS = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2}


def _distribution(answer: dict[str, Any]) -> dict[str, Any]:
    """The job's enabled modes, as its API answer gives them."""
    given = answer["spec"]["distribution"]
    return {key: value for key, value in given.items() if value is not None}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (MPI_FLAGS, {"mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": ""}}),
        # As the wire carries them: every value a string.
        (
            {
                "sagemaker_mpi_enabled": "true",
                "sagemaker_mpi_num_of_processes_per_host": "2",
                "sagemaker_mpi_custom_mpi_options": "-x NCCL_DEBUG",
            },
            {
                "mpi": {
                    "enabled": True,
                    "processes_per_host": 2,
                    "custom_mpi_options": "-x NCCL_DEBUG",
                }
            },
        ),
        ({"sagemaker_torch_distributed_enabled": "true"}, {"torch_distributed": {"enabled": True}}),
        (
            {"sagemaker_distributed_dataparallel_enabled": True},
            {"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": ""}}},
        ),
    ],
)
def test_flags_in_hyperparameters_choose_the_distribution(
    api: TestClient, source_dir: Path, flags: dict[str, Any], expected: dict[str, Any]
) -> None:
    spec = job_spec(source_dir, instance_count=2, hyperparameters={**flags, "epochs": 1})
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text
    found = _distribution(response.json())
    assert {k: v for k, v in found.items() if k != "smdistributed"} == {
        k: v for k, v in expected.items() if k != "smdistributed"
    }
    if "smdistributed" in expected:
        assert found["smdistributed"]["dataparallel"] == expected["smdistributed"]["dataparallel"]
    # They stay where SageMaker's containers look for them.
    assert response.json()["spec"]["hyperparameters"]["epochs"] == 1


def test_a_distribution_that_agrees_with_the_flags_is_kept(
    api: TestClient, source_dir: Path
) -> None:
    spec = job_spec(
        source_dir,
        instance_count=2,
        hyperparameters=MPI_FLAGS,
        distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
    )
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text
    assert _distribution(response.json())["mpi"]["processes_per_host"] == 2


@pytest.mark.parametrize(
    ("flags", "distribution", "named"),
    [
        (
            {"sagemaker_torch_distributed_enabled": True},
            {"mpi": {"enabled": True}},
            ["hyperparameters.sagemaker_torch_distributed_enabled", "distribution enables mpi"],
        ),
        (
            MPI_FLAGS,
            {"mpi": {"enabled": True, "processes_per_host": 1}},
            [
                "hyperparameters.sagemaker_mpi_num_of_processes_per_host is 2",
                "distribution.mpi.processes_per_host is 1",
            ],
        ),
    ],
)
def test_a_distribution_that_disagrees_with_the_flags_is_refused_naming_both(
    api: TestClient,
    source_dir: Path,
    flags: dict[str, Any],
    distribution: dict[str, Any],
    named: list[str],
) -> None:
    spec = job_spec(source_dir, instance_count=2, hyperparameters=flags, distribution=distribution)
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "distribution"]
    for words in named:
        assert words in error["msg"]
    assert api.get("/v1/training-jobs").json()["items"] == []


@pytest.mark.parametrize(
    ("flags", "loc"),
    [
        (
            {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "0"},
            ["hyperparameters", "sagemaker_mpi_num_of_processes_per_host"],
        ),
        (
            {"sagemaker_mpi_enabled": "true", "sagemaker_torch_distributed_enabled": "true"},
            ["hyperparameters"],
        ),
        (
            {"sagemaker_pytorch_xla_multi_worker_enabled": "true"},
            ["hyperparameters", "sagemaker_pytorch_xla_multi_worker_enabled"],
        ),
        (
            {"sagemaker_distribution_instance_groups": '["a"]'},
            ["hyperparameters", "sagemaker_distribution_instance_groups"],
        ),
    ],
)
def test_a_bad_flag_is_refused_naming_the_hyperparameter(
    api: TestClient, source_dir: Path, flags: dict[str, Any], loc: list[str]
) -> None:
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, hyperparameters=flags))
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", *loc]
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_a_flag_set_to_false_enables_nothing(api: TestClient, source_dir: Path) -> None:
    spec = job_spec(source_dir, hyperparameters={"sagemaker_mpi_enabled": "false"})
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text
    assert all(not (mode or {}).get("enabled") for mode in _distribution(response.json()).values())


def test_what_the_modes_find_wrong_is_named_at_the_flag_that_gave_it(
    api: TestClient, source_dir: Path
) -> None:
    flags = {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_custom_mpi_options": "-x LD_PRELOAD"}
    response = api.post(
        "/v1/training-jobs", json=job_spec(source_dir, instance_count=2, hyperparameters=flags)
    )
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "hyperparameters", "sagemaker_mpi_custom_mpi_options"]
    assert "LD_PRELOAD" in error["msg"]


def test_a_count_in_other_digits_is_refused_naming_the_flag(
    api: TestClient, source_dir: Path
) -> None:
    flags = {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "²"}
    response = api.post("/v1/training-jobs", json=job_spec(source_dir, hyperparameters=flags))
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "hyperparameters", "sagemaker_mpi_num_of_processes_per_host"]


def test_a_stored_spec_is_not_read_again_under_rules_that_came_since(source_dir: Path) -> None:
    # Accepted before flags were read: a job stored so keeps running what it was given.
    stored = job_spec(
        source_dir,
        instance_count=2,
        output_path=source_dir.parent.as_uri(),
        hyperparameters={"sagemaker_mpi_enabled": "true"},
        distribution={"torch_distributed": {"enabled": True}},
    )
    assert JobRecord.load(stored).distribution.enabled_modes() == ["torch_distributed"]
    with pytest.raises(ValidationError):
        JobCreate.model_validate(stored)
