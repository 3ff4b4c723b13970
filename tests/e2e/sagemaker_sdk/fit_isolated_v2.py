"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's): a
PyTorch estimator with enable_network_isolation=True, as a notebook writes it, whose code
the SDK ships as a ``code`` channel.

    python fit_isolated_v2.py SOURCE_DIR BUCKET

Prints one line ``result {...}`` with what DescribeTrainingJob says of the job.
"""

import json
import sys
import tempfile
from pathlib import Path

import sagemaker
from sagemaker.pytorch import PyTorch

source_dir, bucket = sys.argv[1:3]
session = sagemaker.Session(default_bucket=bucket)
with tempfile.TemporaryDirectory() as scratch:
    (Path(scratch) / "rows.csv").write_text("1,2\n")
    training = session.upload_data(scratch, bucket=bucket, key_prefix="isolated/training")
estimator = PyTorch(
    entry_point="train.py",
    source_dir=source_dir,
    role="arn:aws:iam::123456789012:role/SageMakerRole",
    framework_version="2.1",
    py_version="py310",
    instance_type="ml.m5.large",
    instance_count=2,
    enable_network_isolation=True,
    sagemaker_session=session,
    disable_profiler=True,
)
estimator.fit({"training": training}, logs=True)
described = session.describe_training_job(estimator.latest_training_job.name)
print(
    "result "
    + json.dumps(
        {
            "name": estimator.latest_training_job.name,
            "status": described["TrainingJobStatus"],
            "isolation": described["EnableNetworkIsolation"],
            "channels": [c["ChannelName"] for c in described["InputDataConfig"]],
            "submit_directory": described["HyperParameters"]["sagemaker_submit_directory"],
        }
    ),
    flush=True,
)
