"""The SDK takes SageMaker's estimator and TrainingInput arguments; what it cannot use is
named once in a log line, and what is misspelt is refused as Python refuses it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from runyard import Client, Estimator, TrainingInput
from runyard.inputs import channels
from runyard.pytorch import PyTorch
from runyard.tensorflow import TensorFlow

SAGEMAKER_STYLE = {
    "role": "arn:aws:iam::111122223333:role/SageMakerRole",
    "framework_version": "2.3",
    "py_version": "py311",
    "instance_type": "local",
    "instance_count": 2,
    "subnets": ["subnet-0abc"],
    "enable_network_isolation": True,
    "tags": [{"Key": "team", "Value": "ml"}],
    "metric_definitions": [{"Name": "loss", "Regex": "loss ([0-9.]+)"}],
}


@pytest.fixture
def client() -> Client:
    # Nothing here reaches a server: only building the spec is tested.
    return Client("http://127.0.0.1:9", "ry_unused")


@pytest.mark.parametrize("estimator_class", [Estimator, PyTorch])
def test_sagemaker_arguments_are_accepted_and_the_unused_named_once(
    estimator_class: type[Estimator], client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="runyard"):
        estimator = estimator_class(entry_point="train.py", client=client, **SAGEMAKER_STYLE)
    [record] = caplog.records
    assert record.getMessage() == (
        f"{estimator_class.__name__}: Runyard does not use role, subnets; ignored"
    )
    assert estimator.spec["enable_network_isolation"] is True
    assert estimator.spec["framework_version"] == "2.3"
    assert estimator.spec["py_version"] == "py311"
    assert estimator.spec["tags"] == [{"key": "team", "value": "ml"}]
    assert estimator.spec["metric_definitions"] == [{"name": "loss", "regex": "loss ([0-9.]+)"}]


def test_a_misspelt_argument_is_still_a_type_error(client: Client) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'instance_typ'"):
        Estimator("train.py", instance_type="local", instance_typ="local", client=client)


def test_framework_classes_take_sagemakers_positional_arguments(client: Client) -> None:
    torch = PyTorch(
        "train.py",
        "2.3",
        "py311",
        "src",
        {"epochs": 2},
        None,
        None,
        **{
            "instance_type": "local",
            "client": client,
        },
    )
    assert torch.spec["framework"] == "pytorch"
    assert torch.source_dir == Path("src")
    assert torch.spec["hyperparameters"] == {"epochs": 2}
    tf = TensorFlow(
        "py310",
        "2.16",
        "s3://bucket/model",
        entry_point="train.py",
        instance_type="local",
        client=client,
    )
    assert tf.spec["framework"] == "tensorflow"
    assert (tf.spec["framework_version"], tf.spec["py_version"]) == ("2.16", "py310")
    assert tf.spec["hyperparameters"] == {"model_dir": "s3://bucket/model"}


def test_channels_from_uris_dicts_and_training_inputs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="runyard"):
        sharded = TrainingInput(
            "s3://bucket/train",
            distribution="ShardedByS3Key",
            compression="Gzip",
            content_type="text/csv",
            s3_data_type="ManifestFile",
            input_mode="FastFile",
            record_wrapping="RecordIO",
        )
    assert [record.getMessage() for record in caplog.records] == [
        "TrainingInput: Runyard does not use record_wrapping; ignored"
    ]
    assert channels(
        {
            "train": sharded,
            "test": {"uri": str(tmp_path), "distribution": "ShardedByS3Key"},
            "extra": "s3://bucket/extra",
        },
        input_mode="Pipe",
    ) == {
        "train": {
            "uri": "s3://bucket/train",
            "s3_data_type": "ManifestFile",
            "distribution": "ShardedByS3Key",
            "compression": "Gzip",
            "content_type": "text/csv",
            "input_mode": "FastFile",
        },
        "test": {"uri": tmp_path.as_uri(), "distribution": "ShardedByS3Key", "input_mode": "Pipe"},
        "extra": {"uri": "s3://bucket/extra", "input_mode": "Pipe"},
    }
    # One input alone is the "training" channel, as in SageMaker.
    assert channels(TrainingInput("s3://bucket/all")) == {
        "training": {
            "uri": "s3://bucket/all",
            "s3_data_type": "S3Prefix",
            "distribution": "FullyReplicated",
        }
    }


class _FileSystemInput:
    """What SageMaker's FileSystemInput holds: an EFS or FSx source, no URI."""

    config = {"DataSource": {"FileSystemDataSource": {"FileSystemId": "fs-0abc"}}}


def test_inputs_that_cannot_be_channels_are_refused_naming_the_channel() -> None:
    from runyard import RunyardError

    with pytest.raises(RunyardError, match=r"inputs\.train: only S3-style data sources"):
        channels({"train": _FileSystemInput()})
    with pytest.raises(RunyardError, match=r"inputs\.test: expected a URI, .* got int"):
        channels({"test": 3})
