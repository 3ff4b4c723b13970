"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's):
trains a job whose metric definition finds the losses it prints, then reads them back as
a notebook does, through CloudWatch (``TrainingJobAnalytics``).

    python analytics_v2.py SOURCE_DIR BUCKET

Prints one line ``result {...}``: the job's name and the two data frames, as lists.
"""

import json
import sys

import sagemaker
from sagemaker.analytics import TrainingJobAnalytics
from sagemaker.pytorch import PyTorch

source_dir, bucket = sys.argv[1:3]
session = sagemaker.Session(default_bucket=bucket)
estimator = PyTorch(
    entry_point="train.py",
    source_dir=source_dir,
    role="arn:aws:iam::123456789012:role/SageMakerRole",
    image_uri=sagemaker.image_uris.retrieve(
        "pytorch",
        session.boto_region_name,
        version="2.1",
        py_version="py310",
        instance_type="ml.m5.large",
        image_scope="training",
    ),
    instance_type="ml.m5.large",
    instance_count=1,
    metric_definitions=[{"Name": "train:loss", "Regex": "loss=([0-9.]+)"}],
    sagemaker_session=session,
    disable_profiler=True,
)
estimator.fit(logs=False)
name = estimator.latest_training_job.name
# The SDK's default: every metric the job defines, averaged per minute.
per_minute = estimator.training_job_analytics.dataframe()
# Per second: each value the script printed.
per_second = TrainingJobAnalytics(
    name, metric_names=["train:loss"], sagemaker_session=session, period=1
).dataframe()
print(
    "result "
    + json.dumps(
        {
            "name": name,
            "per_minute": per_minute.to_dict(orient="list"),
            "per_second": per_second.to_dict(orient="list"),
        }
    ),
    flush=True,
)
