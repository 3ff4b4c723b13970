"""Runs inside a virtual environment with the SageMaker Python SDK v2 (not Runyard's):
the SDK's own ``HyperparameterTuner.create`` over two estimators, each with its own
ranges, static hyperparameters and objective metric (a tuning job of several training
job definitions), then ``attach``, ``best_training_job()``, ``best_estimator()`` and
``analytics().dataframe()``, as a notebook does.

    python tune_definitions_v2.py SOURCE_DIR BUCKET

Prints one line ``result {...}``: the tuning job's status and definitions as described,
each trial's definition, tuned values and final objective, the best, and what attach and
analytics read back.
"""

import json
import sys

import sagemaker
from sagemaker.pytorch import PyTorch
from sagemaker.tuner import ContinuousParameter, HyperparameterTuner, IntegerParameter

source_dir, bucket = sys.argv[1:3]
session = sagemaker.Session(default_bucket=bucket)


def estimator(**hyperparameters):
    return PyTorch(
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
        hyperparameters=hyperparameters,
        sagemaker_session=session,
    )


# "narrow" searches shift near its best for one epoch; "wide" searches all of it with
# its epochs, and reads its objective under a metric name of its own.
ranges = {
    "narrow": {"shift": ContinuousParameter(0.2, 0.4)},
    "wide": {"shift": ContinuousParameter(0.0, 1.0), "epochs": IntegerParameter(1, 2)},
}
tuner = HyperparameterTuner.create(
    estimator_dict={"narrow": estimator(epochs=1), "wide": estimator()},
    objective_metric_name_dict={"narrow": "loss", "wide": "wide_loss"},
    hyperparameter_ranges_dict=ranges,
    metric_definitions_dict={
        "narrow": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        "wide": [{"Name": "wide_loss", "Regex": "loss=([0-9.]+)"}],
    },
    objective_type="Minimize",
    strategy="Random",
    max_jobs=4,
    max_parallel_jobs=2,
    random_seed=5,
    base_tuning_job_name="definitions",
)
# Each estimator's inputs, and (as the SDK asks with several estimators) include_cls_metadata
# by estimator name, as the SDK's own multi-algorithm test gives them.
data = session.upload_data(path=source_dir, key_prefix="tune-definitions-data")
tuner.fit(inputs={"narrow": data, "wide": data}, include_cls_metadata={})
tuner.wait()
name = tuner.latest_tuning_job.name
described = tuner.describe()
trials = session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
    HyperParameterTuningJobName=name
)["TrainingJobSummaries"]
attached = HyperparameterTuner.attach(
    name,
    sagemaker_session=session,
    estimator_cls={"narrow": "sagemaker.pytorch.PyTorch", "wide": "sagemaker.pytorch.PyTorch"},
)
best_estimator = tuner.best_estimator()
analytics = tuner.analytics()
frame = analytics.dataframe()
result = {
    "status": described["HyperParameterTuningJobStatus"],
    "definitions": [d["DefinitionName"] for d in described["TrainingJobDefinitions"]],
    "channels": {
        d["DefinitionName"]: [c["ChannelName"] for c in d.get("InputDataConfig", [])]
        for d in described["TrainingJobDefinitions"]
    },
    "best": tuner.best_training_job(),
    "best_definition": described["BestTrainingJob"]["TrainingJobDefinitionName"],
    "best_estimator_job": best_estimator.latest_training_job.name,
    "trials": [
        {
            "name": trial["TrainingJobName"],
            "definition": trial["TrainingJobDefinitionName"],
            "tuned": trial["TunedHyperParameters"],
            "metric": trial["FinalHyperParameterTuningJobObjectiveMetric"]["MetricName"],
            "loss": trial["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
        }
        for trial in trials
    ],
    "attached": {
        "estimators": sorted(attached.estimator_dict),
        "classes": sorted({type(e).__name__ for e in attached.estimator_dict.values()}),
        "metrics": attached.objective_metric_name_dict,
        "ranges": {
            key: sorted(item["Name"] for kind in ranges.values() for item in kind)
            for key, ranges in attached.hyperparameter_ranges_dict().items()
        },
    },
    "analytics": {
        "columns": list(frame.columns),
        "definitions": sorted(frame["TrainingJobDefinitionName"]),
        # As the SDK's own multi-algorithm test checks them: each definition's ranges as
        # the tuner's ranges write them.
        "ranges_as_given": analytics.tuning_ranges
        == {
            name: {key: value.as_tuning_range(key) for key, value in given.items()}
            for name, given in ranges.items()
        },
    },
}
print("result " + json.dumps(result), flush=True)
