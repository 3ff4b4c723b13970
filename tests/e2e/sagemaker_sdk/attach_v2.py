"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's):
attaches to a job that someone else submitted, as a notebook does.

    python attach_v2.py JOB_NAME

Prints one line ``result {...}`` with what the attached estimators say of the job.
"""

import json
import sys

import sagemaker
from sagemaker.estimator import Estimator
from sagemaker.pytorch import PyTorch

name = sys.argv[1]
session = sagemaker.Session()
generic = Estimator.attach(name, sagemaker_session=session)
framework = PyTorch.attach(name, sagemaker_session=session)
print(
    "result "
    + json.dumps(
        {
            "role": generic.role,
            "instance_count": generic.instance_count,
            "instance_type": generic.instance_type,
            "output_path": generic.output_path,
            "model_data": generic.model_data,
            "entry_point": framework.entry_point,
            "source_dir": framework.source_dir,
            "hyperparameters": framework.hyperparameters(),
            "distribution": getattr(framework, "distribution", None),
        }
    ),
    flush=True,
)
