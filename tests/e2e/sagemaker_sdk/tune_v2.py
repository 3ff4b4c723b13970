"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's):
tunes a PyTorch estimator with the SDK's own HyperparameterTuner, as a notebook does.

    python tune_v2.py SOURCE_DIR BUCKET [hyperband]

Prints one line ``result {...}``: the tuning job's status, its best training job, and
each trial's name, tuned ``shift`` and final loss, as the SDK's calls return them.
Without ``hyperband``: a Random search with early stopping (``Auto``), then a warm start
from it (``identical_dataset_and_algorithm_tuner``, one trial), that warm start attached
(``HyperparameterTuner.attach``), and the first tuning job's ``analytics().dataframe()``;
with it, the Hyperband strategy with MaxResource 2, each trial slowed down so that it is
stopped there.
"""

import json
import sys

import sagemaker
from sagemaker.pytorch import PyTorch
from sagemaker.tuner import (
    ContinuousParameter,
    HyperbandStrategyConfig,
    HyperparameterTuner,
    StrategyConfig,
)

METRICS = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]

source_dir, bucket = sys.argv[1:3]
hyperband = sys.argv[3:] == ["hyperband"]
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
    # Hyperband's trials would print 60 epochs, 2 seconds apart: only the tuner's stop at
    # MaxResource (2) ends them. With 6 (8 s left after step 2), a suite's loaded machine
    # once let every trial end on its own before the tuner's stop reached it; stopped as
    # it should be, a trial takes no longer.
    hyperparameters={"epochs": 60, "sleep": 2} if hyperband else {"epochs": 2},
    sagemaker_session=session,
    disable_profiler=True,
)
tuner = HyperparameterTuner(
    estimator,
    objective_metric_name="loss",
    hyperparameter_ranges={"shift": ContinuousParameter(0.0, 1.0)},
    metric_definitions=METRICS,
    objective_type="Minimize",
    max_jobs=3,
    max_parallel_jobs=2,
    random_seed=5,
    # The SDK names a tuning job to the minute: each test's has a base of its own.
    base_tuning_job_name="hyperband" if hyperband else "median-rule",
    **(
        {
            "strategy": "Hyperband",
            "strategy_config": StrategyConfig(
                HyperbandStrategyConfig(max_resource=2, min_resource=1)
            ),
        }
        if hyperband
        else {"strategy": "Random", "early_stopping_type": "Auto"}
    ),
)
tuner.fit()
tuner.wait()
best = tuner.best_training_job()
described = tuner.describe()
trials = session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
    HyperParameterTuningJobName=tuner.latest_tuning_job.name
)["TrainingJobSummaries"]
result = {
    "name": tuner.latest_tuning_job.name,
    "status": described["HyperParameterTuningJobStatus"],
    "config": described["HyperParameterTuningJobConfig"],
    "counters": described["TrainingJobStatusCounters"],
    "best": best,
    "best_loss": described["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"][
        "Value"
    ],
    "trials": [
        {
            "name": trial["TrainingJobName"],
            "status": trial["TrainingJobStatus"],
            "objective_status": trial["ObjectiveStatus"],
            "reason": trial.get("FailureReason"),
            "shift": float(trial["TunedHyperParameters"]["shift"]),
            "loss": trial["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
        }
        for trial in trials
    ],
}
if not hyperband:
    child = tuner.identical_dataset_and_algorithm_tuner()
    child.base_tuning_job_name = "warm-start"
    child.max_jobs = 1
    # The SDK's warm start tuner does not copy the tuner's metric definitions (SageMaker
    # would refuse the objective without them too): given again, as users do.
    child.metric_definitions = METRICS
    child.fit()
    child.wait()
    child_described = child.describe()
    attached = HyperparameterTuner.attach(child.latest_tuning_job.name, sagemaker_session=session)
    frame = tuner.analytics().dataframe()
    result["warm"] = {
        "status": child_described["HyperParameterTuningJobStatus"],
        "warm_start": child_described["WarmStartConfig"],
        "overall_best": child_described["OverallBestTrainingJob"]["TrainingJobName"],
        "overall_best_of": child_described["OverallBestTrainingJob"]["TuningJobName"],
        "best": child.best_training_job(),
        "attached_type": attached.warm_start_config.type.value,
        "attached_parents": sorted(attached.warm_start_config.parents),
        "attached_max_jobs": attached.max_jobs,
    }
    result["analytics"] = {
        "columns": sorted(frame.columns),
        "rows": [
            {"name": row["TrainingJobName"], "loss": row["FinalObjectiveValue"]}
            for row in frame.to_dict("records")
        ],
    }
print("result " + json.dumps(result, default=str), flush=True)
