"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's):
tunes a PyTorch estimator with the SDK's own HyperparameterTuner, as a notebook does.

    python tune_v2.py SOURCE_DIR BUCKET

Prints one line ``result {...}``: the tuning job's status, its best training job, and
each trial's name, tuned ``shift`` and final loss, as the SDK's calls return them.
"""

import json
import sys

import sagemaker
from sagemaker.pytorch import PyTorch
from sagemaker.tuner import ContinuousParameter, HyperparameterTuner

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
    hyperparameters={"epochs": 2},
    sagemaker_session=session,
    disable_profiler=True,
)
tuner = HyperparameterTuner(
    estimator,
    objective_metric_name="loss",
    hyperparameter_ranges={"shift": ContinuousParameter(0.0, 1.0)},
    metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
    objective_type="Minimize",
    max_jobs=3,
    max_parallel_jobs=2,
    strategy="Random",
    random_seed=5,
)
tuner.fit()
tuner.wait()
best = tuner.best_training_job()
described = tuner.describe()
trials = session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
    HyperParameterTuningJobName=tuner.latest_tuning_job.name
)["TrainingJobSummaries"]
print(
    "result "
    + json.dumps(
        {
            "name": tuner.latest_tuning_job.name,
            "status": described["HyperParameterTuningJobStatus"],
            "counters": described["TrainingJobStatusCounters"],
            "best": best,
            "best_loss": described["BestTrainingJob"][
                "FinalHyperParameterTuningJobObjectiveMetric"
            ]["Value"],
            "trials": [
                {
                    "name": trial["TrainingJobName"],
                    "status": trial["TrainingJobStatus"],
                    "shift": float(trial["TunedHyperParameters"]["shift"]),
                    "loss": trial["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
                }
                for trial in trials
            ],
        }
    ),
    flush=True,
)
