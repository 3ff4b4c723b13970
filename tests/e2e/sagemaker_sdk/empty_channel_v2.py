"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's): fits
with a channel whose S3 prefix holds nothing, as a notebook whose upload went elsewhere.

    python empty_channel_v2.py SOURCE_DIR ENTRY_POINT BUCKET

Prints one line ``result {...}``: what ``fit`` raised, and the job as the SDK describes it.
"""

import json
import sys

import sagemaker
from sagemaker.exceptions import UnexpectedStatusException
from sagemaker.pytorch import PyTorch

source_dir, entry_point, bucket = sys.argv[1:4]
session = sagemaker.Session(default_bucket=bucket)
image = sagemaker.image_uris.retrieve(
    "pytorch",
    session.boto_region_name,
    version="2.1",
    py_version="py310",
    instance_type="ml.m5.large",
    image_scope="training",
)
estimator = PyTorch(
    entry_point=entry_point,
    source_dir=source_dir,
    role="arn:aws:iam::123456789012:role/SageMakerRole",
    image_uri=image,
    instance_type="ml.m5.large",
    instance_count=1,
    sagemaker_session=session,
    disable_profiler=True,
)
channel = f"s3://{bucket}/nothing-was-uploaded-here/train"
try:
    estimator.fit({"train": channel}, logs=False)
    raised = None
except UnexpectedStatusException:
    raised = "UnexpectedStatusException"
described = session.describe_training_job(estimator.latest_training_job.name)
print(
    "result "
    + json.dumps(
        {
            "raised": raised,
            "channel": channel,
            "status": described["TrainingJobStatus"],
            "failure_reason": described.get("FailureReason"),
        }
    ),
    flush=True,
)
