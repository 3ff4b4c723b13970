"""Runs inside a virtual environment with the SageMaker Python SDK v3 (not Runyard's):
trains with a ModelTrainer, a SourceCode and a Torchrun distributed config, against
whatever endpoints the environment names.

    python train_v3.py SOURCE_DIR ENTRY_SCRIPT INSTANCE_COUNT BUCKET IMAGE

Prints one line ``result {...}`` with what the SDK reports once ``train`` returns.
"""

import json
import logging
import sys

from sagemaker.core.helper.session_helper import Session
from sagemaker.train import ModelTrainer
from sagemaker.train.configs import Compute, SourceCode
from sagemaker.train.distributed import Torchrun

source_dir, entry_script, count, bucket, image = sys.argv[1:6]
# The SDK v3 leaves logging to the application: it prints the training logs at INFO.
logging.basicConfig(format="%(message)s")
logging.getLogger("sagemaker").setLevel(logging.INFO)
trainer = ModelTrainer(
    training_image=image,
    source_code=SourceCode(source_dir=source_dir, entry_script=entry_script),
    compute=Compute(instance_type="ml.m5.large", instance_count=int(count)),
    distributed=Torchrun(),
    hyperparameters={"epochs": 2},
    role="arn:aws:iam::123456789012:role/SageMakerRole",
    sagemaker_session=Session(default_bucket=bucket),
    base_job_name="v3-torchrun",
)
trainer.train(wait=True, logs=True)
job = trainer._latest_training_job
print(
    "result "
    + json.dumps(
        {
            "name": job.training_job_name,
            "status": job.training_job_status,
            "model_data": job.model_artifacts.s3_model_artifacts,
        }
    ),
    flush=True,
)
