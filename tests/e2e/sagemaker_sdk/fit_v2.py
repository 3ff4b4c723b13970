"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's):
trains as a SageMaker notebook does, against whatever endpoints the environment names.

    python fit_v2.py SOURCE_DIR ENTRY_POINT INSTANCE_COUNT DISTRIBUTION_JSON BUCKET

Prints one line ``result {...}`` with what the SDK reports once ``fit`` returns.
"""

import json
import sys

import sagemaker
from sagemaker.debugger import TensorBoardOutputConfig
from sagemaker.estimator import Estimator
from sagemaker.pytorch import PyTorch

source_dir, entry_point, count, distribution, bucket = sys.argv[1:6]
session = sagemaker.Session(default_bucket=bucket)
# The SDK's own name for the CPU training image: it refuses torch_distributed for a CPU
# instance type unless the image is named (as SageMaker would run it too).
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
    instance_count=int(count),
    distribution=json.loads(distribution),
    hyperparameters={"epochs": 2, "learning-rate": 0.05},
    sagemaker_session=session,
    disable_profiler=True,
    tensorboard_output_config=TensorBoardOutputConfig(s3_output_path=f"s3://{bucket}/tensorboard"),
)
estimator.fit(logs=True)
attached = Estimator.attach(estimator.latest_training_job.name, sagemaker_session=session)
print(
    "result "
    + json.dumps(
        {
            "name": estimator.latest_training_job.name,
            "model_data": estimator.model_data,
            "attached_model_data": attached.model_data,
            "attached_instance_count": attached.instance_count,
            "tensorboard": estimator.latest_job_tensorboard_artifacts_path(),
            "status": session.describe_training_job(estimator.latest_training_job.name)[
                "TrainingJobStatus"
            ],
        }
    ),
    flush=True,
)
