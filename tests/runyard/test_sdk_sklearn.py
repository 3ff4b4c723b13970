"""``runyard.sklearn.SKLearn`` takes ``sagemaker.sklearn.SKLearn``'s arguments and holds
to what SageMaker's holds to: a version or an image, Python 3, one instance."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from runyard import Client
from runyard.sklearn import SKLearn


@pytest.fixture
def client() -> Client:
    # Nothing here reaches a server: only building the spec is tested.
    return Client("http://127.0.0.1:9", "ry_unused")


def test_sagemakers_positional_arguments_make_a_scikit_learn_job(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="runyard"):
        estimator = SKLearn(
            "train.py",
            "1.2-1",
            "py3",
            "src",
            {"epochs": 1},
            None,
            "us-west-2",
            role="arn:aws:iam::111122223333:role/SageMakerRole",
            instance_type="ml.m5.large",
            client=client,
        )
    assert estimator.spec["framework"] == "sklearn"
    assert (estimator.spec["framework_version"], estimator.spec["py_version"]) == ("1.2-1", "py3")
    assert estimator.spec["instance_count"] == 1
    assert estimator.spec["hyperparameters"] == {"epochs": 1}
    assert estimator.source_dir == Path("src")
    assert [r.getMessage() for r in caplog.records] == [
        "SKLearn: Runyard does not use image_uri_region; ignored",
        "SKLearn: Runyard does not use role; ignored",
    ]


def test_an_image_names_it_as_well_as_a_version(client: Client) -> None:
    uri = "246618743249.dkr.ecr.us-west-2.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
    estimator = SKLearn("train.py", image_uri=uri, instance_type="local", client=client)
    assert estimator.spec["image_uri"] == uri


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({}, "framework_version or image_uri is required"),
        ({"framework_version": "1.2-1", "py_version": "py2"}, "give py_version='py3'"),
        ({"framework_version": "1.2-1", "instance_count": 2}, "give instance_count=1"),
    ],
)
def test_what_sagemakers_refuses_is_refused(
    client: Client, arguments: dict[str, object], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        SKLearn("train.py", instance_type="local", client=client, **arguments)  # type: ignore[arg-type]
