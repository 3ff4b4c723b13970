"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's):
trains with the SDK's SKLearn estimator as a notebook does, against whatever endpoints the
environment names.

    python fit_sklearn_v2.py SOURCE_DIR FRAMEWORK_VERSION BUCKET DATA_DIR

DATA_DIR holds train.npz, which goes to S3 as the train channel. Prints one line
``result {...}`` with what the SDK reports once ``fit`` returns.
"""

import json
import sys

import sagemaker
from sagemaker.sklearn import SKLearn

source_dir, framework_version, bucket, data_dir = sys.argv[1:5]
session = sagemaker.Session(default_bucket=bucket)
estimator = SKLearn(
    entry_point="train.py",
    source_dir=source_dir,
    role="arn:aws:iam::123456789012:role/SageMakerRole",
    instance_type="ml.m5.large",
    framework_version=framework_version,
    py_version="py3",
    hyperparameters={"epochs": 1},
    sagemaker_session=session,
)
train = session.upload_data(path=data_dir, key_prefix="sklearn/train")
estimator.fit({"train": train}, logs=True)
described = session.describe_training_job(estimator.latest_training_job.name)
print(
    "result "
    + json.dumps(
        {
            "name": estimator.latest_training_job.name,
            "model_data": estimator.model_data,
            "status": described["TrainingJobStatus"],
            "image": described["AlgorithmSpecification"]["TrainingImage"],
        }
    ),
    flush=True,
)
