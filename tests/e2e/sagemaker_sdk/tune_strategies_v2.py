"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's):
the SDK's own HyperparameterTuner with the Bayesian strategy over a continuous range, then
the Grid strategy over a categorical and an integer range, as a notebook does.

    python tune_strategies_v2.py SOURCE_DIR BUCKET

Prints one line ``result {...}``: for each strategy, the tuning job's status, its best
training job and each trial's tuned values and final loss, as the SDK's calls return them.
"""

import json
import sys

import sagemaker
from sagemaker.pytorch import PyTorch
from sagemaker.tuner import (
    CategoricalParameter,
    ContinuousParameter,
    HyperparameterTuner,
    IntegerParameter,
)

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
    sagemaker_session=session,
    disable_profiler=True,
)


def tune(strategy, ranges, max_jobs):
    tuner = HyperparameterTuner(
        estimator,
        objective_metric_name="loss",
        hyperparameter_ranges=ranges,
        metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        objective_type="Minimize",
        strategy=strategy,
        max_jobs=max_jobs,
        max_parallel_jobs=2,
        random_seed=11,
        # The SDK names a tuning job to the minute: each run's has a base of its own.
        base_tuning_job_name=strategy.lower(),
    )
    tuner.fit()
    tuner.wait()
    described = tuner.describe()
    trials = session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=tuner.latest_tuning_job.name
    )["TrainingJobSummaries"]
    return {
        "status": described["HyperParameterTuningJobStatus"],
        "strategy": described["HyperParameterTuningJobConfig"]["Strategy"],
        "best": tuner.best_training_job(),
        "trials": [
            {
                "name": trial["TrainingJobName"],
                "tuned": trial["TunedHyperParameters"],
                "loss": trial["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
            }
            for trial in trials
        ],
    }


result = {
    "bayesian": tune("Bayesian", {"shift": ContinuousParameter(0.0, 1.0)}, 2),
    # The grid: every pair of the two ranges' values, once each. (The SDK sends max_jobs
    # even where it is None, which botocore refuses: the grid's size, then.)
    "grid": tune(
        "Grid",
        {"shift": CategoricalParameter([0.1, 0.3]), "epochs": IntegerParameter(1, 2)},
        4,
    ),
}
print("result " + json.dumps(result), flush=True)
