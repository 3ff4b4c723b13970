"""The SDK: an estimator in the shape of the SageMaker Python SDK's.

est = Estimator(entry_point="train.py", source_dir="src", instance_type="local",
                instance_count=2, distribution={"torch_distributed": {"enabled": True}},
                hyperparameters={"epochs": 3})
est.fit({"train": "data/"}, wait=True, logs=True)
print(est.model_data)

SageMaker's own estimator arguments are accepted, so code written for it runs with its
imports changed; those Runyard has no use for (``role``, ``sagemaker_session``, VPC and
encryption settings, Debugger and Profiler) are named once in a log line. The SDK's
other habits work as there: ``fit(wait=False)`` then ``latest_training_job.name``,
``Estimator.attach(name)``, ``logs()`` and ``training_job_analytics``.

A framework's estimator (``runyard.pytorch.PyTorch``) is this class with its
``framework`` set and SageMaker's positional arguments in front.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from runyard import cloning
from runyard.analytics import TrainingJobAnalytics
from runyard.client import Client, RunyardError
from runyard.inputs import channels, note_unused
from runyard.output import still_running, submitted
from runyard.training_job import JobFailedError, TrainingJob

# The SageMaker estimator arguments (EstimatorBase, Framework and the framework classes)
# that mean nothing to Runyard: AWS identities and sessions, VPC and KMS settings,
# Debugger, Profiler, warm pools, heterogeneous clusters, Git and recipe sources.
SAGEMAKER_ONLY = frozenset(
    {
        "role",
        "sagemaker_session",
        "keep_alive_period_in_seconds",
        "volume_kms_key",
        "output_kms_key",
        "subnets",
        "security_group_ids",
        "model_uri",
        "model_channel_name",
        "encrypt_inter_container_traffic",
        "rules",
        "debugger_hook_config",
        "enable_sagemaker_metrics",
        "profiler_config",
        "disable_profiler",
        "git_config",
        "container_log_level",
        "code_location",
        "dependencies",
        "instance_groups",
        "training_repository_access_mode",
        "training_repository_credentials_provider_arn",
        "enable_infra_check",
        "container_entry_point",
        "container_arguments",
        "enable_remote_debug",
        "enable_session_tag_chaining",
        "training_plan",
        "instance_placement_config",
        "compiler_config",
        "training_recipe",
        "recipe_overrides",
    }
)


# What the job's record holds that is no constructor argument: the code (an attached
# estimator keeps it stored), the channels (``fit()``'s) and the framework (the class's).
_NOT_CONSTRUCTED = frozenset({"source_uri", "inputs", "framework"})


class Estimator:
    # Set by the framework classes (runyard.pytorch, runyard.tensorflow), as SageMaker
    # picks the framework by class.
    framework: ClassVar[str | None] = None

    def __init__(
        self,
        entry_point: str,
        *,
        instance_type: str,
        instance_count: int = 1,
        source_dir: str | Path | None = None,
        distribution: dict[str, Any] | None = None,
        hyperparameters: dict[str, Any] | None = None,
        base_job_name: str | None = None,
        output_path: str | None = None,
        max_run: int | None = None,
        environment: dict[str, str] | None = None,
        tags: list[dict[str, str]] | dict[str, str] | None = None,
        backend: str | None = None,
        volume_size: int | None = None,
        metric_definitions: list[dict[str, str]] | None = None,
        checkpoint_s3_uri: str | None = None,
        checkpoint_local_path: str | None = None,
        use_spot_instances: bool = False,
        max_wait: int | None = None,
        max_retry_attempts: int | None = None,
        retry_rules: list[dict[str, Any]] | None = None,
        priority: int | None = None,
        progress_metric: dict[str, Any] | None = None,
        image_uri: str | None = None,
        framework_version: str | None = None,
        py_version: str | None = None,
        input_mode: str | None = None,
        enable_network_isolation: bool = False,
        disable_output_compression: bool = False,
        tensorboard_output_config: Any = None,
        client: Client | None = None,
        **sagemaker_only: Any,
    ) -> None:
        unknown = sorted(set(sagemaker_only) - SAGEMAKER_ONLY)
        if unknown:
            raise TypeError(
                f"{type(self).__name__}() got an unexpected keyword argument {unknown[0]!r}"
            )
        note_unused(type(self).__name__, **sagemaker_only)
        self.entry_point = entry_point
        self.source_dir = Path(source_dir) if source_dir is not None else None
        self.input_mode = input_mode
        self.spec: dict[str, Any] = {
            "framework": self.framework,
            "image_uri": image_uri,
            "framework_version": framework_version,
            "py_version": py_version,
            "instance_type": instance_type,
            "instance_count": instance_count,
            "distribution": distribution or {},
            "hyperparameters": hyperparameters or {},
            "base_job_name": base_job_name,
            "output_path": output_path,
            "max_run": max_run,
            "environment": environment or {},
            "tags": _tags(tags),
            "backend": backend,
            "volume_size": volume_size,
            "metric_definitions": _metric_definitions(metric_definitions),
            "checkpoint_s3_uri": checkpoint_s3_uri,
            "checkpoint_local_path": checkpoint_local_path,
            "use_spot_instances": use_spot_instances or None,
            "max_wait": max_wait,
            "max_retry_attempts": max_retry_attempts,
            "retry_rules": retry_rules,
            "priority": priority,
            "progress_metric": progress_metric,
            # The instances reach each other and nothing else, as on SageMaker.
            "enable_network_isolation": enable_network_isolation or None,
            # The model stored as its files, not packed in a model.tar.gz.
            "output_compression": "NONE" if disable_output_compression else None,
            **_tensorboard(tensorboard_output_config),
        }
        self.client = client or Client()
        self.latest_training_job: TrainingJob | None = None
        # The code an attached estimator's job ran, already stored: fit() submits it
        # again rather than packing a directory.
        self._stored_source: str | None = None

    @classmethod
    def attach(
        cls,
        training_job_name: str,
        sagemaker_session: object = None,
        model_channel_name: str = "model",
        *,
        client: Client | None = None,
    ) -> Self:
        """An estimator bound to the job ``training_job_name``, made with the arguments it
        was submitted with; as in SageMaker, this waits for the job to end (without its
        logs: ``logs()`` prints them) and raises JobFailedError if it Failed. ``fit()``
        then submits its code again as a new job. ``sagemaker_session`` and
        ``model_channel_name`` are the SDK's, and unused: ``client`` says which server."""
        note_unused(f"{cls.__name__}.attach", sagemaker_session=sagemaker_session)
        client = client or Client()
        job = client.get_job(training_job_name)
        framework = job["spec"]["framework"]
        if cls.framework is not None and framework != cls.framework:
            raise ValueError(
                f"training job {training_job_name} is a {framework} job, not {cls.framework}: "
                "attach it with that framework's estimator"
            )
        # As submitted, with a base for new names from the job's own (train-2026-... gives
        # train), as the SDK's attached estimator names its next job.
        submitted_as = cloning.request_of(client, training_job_name)
        estimator = cls(**cls._arguments_of(submitted_as), client=client)
        estimator.spec["framework"] = framework
        estimator._stored_source = submitted_as.get("source_uri")
        estimator.latest_training_job = TrainingJob(client, training_job_name, job)
        estimator.latest_training_job.wait(logs="None")
        return estimator

    @classmethod
    def _arguments_of(cls, submitted_as: dict[str, Any]) -> dict[str, Any]:
        """The constructor's arguments that make a job's spec (``GET .../clone``): a
        framework class whose own arguments are not spec fields overrides this."""
        taken = inspect.signature(Estimator.__init__).parameters
        arguments = {
            key: value
            for key, value in submitted_as.items()
            if key in taken and key not in _NOT_CONSTRUCTED and value is not None
        }
        if submitted_as.get("output_compression") == "NONE":  # the SDK's name for it
            arguments["disable_output_compression"] = True
        if submitted_as.get("tensorboard_s3_output_path"):
            arguments["tensorboard_output_config"] = {
                "s3_output_path": submitted_as["tensorboard_s3_output_path"],
                "container_local_output_path": submitted_as.get("tensorboard_local_path"),
            }
        return arguments

    def latest_job_tensorboard_artifacts_path(self) -> str | None:
        """Where the latest job's TensorBoard data is stored (``<s3_output_path>/<job
        name>/tensorboard-output``), as the SDK's method says it; None without one."""
        stored = self.spec.get("tensorboard_s3_output_path")
        if self.latest_training_job is None or not stored:
            return None
        return f"{stored.rstrip('/')}/{self.latest_training_job.name}/tensorboard-output"

    def enable_network_isolation(self) -> bool:
        """Whether the job's instances run without a network beyond each other, as the
        SDK's method says it."""
        return bool(self.spec["enable_network_isolation"])

    def fit(
        self,
        inputs: Any = None,
        wait: bool = True,
        logs: bool | str = True,
        job_name: str | None = None,
        experiment_config: dict[str, str] | None = None,
        *,
        echo: Callable[[str], None] = print,
    ) -> dict[str, Any]:
        """Submit the job (``latest_training_job`` is then it); with ``wait``, block until
        it ends (raising JobFailedError if it Failed) and, with ``logs``, print its lines
        as they come. Returns the job's description.

        ``inputs``: channel name -> URI, local path, channel dict or TrainingInput (one
        alone is the ``training`` channel). ``logs`` also takes SageMaker's words ("All",
        "None", ...). Ctrl-C stops the watching, not the job.
        """
        note_unused("fit", experiment_config=experiment_config)
        job = self.client.create_job(self._spec(inputs, job_name))
        self.latest_training_job = TrainingJob(self.client, job["name"], job)
        echo(submitted(job["name"]))
        if not wait:
            return job
        return self._wait(logs, echo)

    def logs(self, *, echo: Callable[[str], None] = print) -> None:
        """Print the latest job's lines from its first, following them until it ends, then
        its summary; raises JobFailedError if it Failed."""
        self._wait("All", echo)

    def _wait(self, logs: bool | str, echo: Callable[[str], None]) -> dict[str, Any]:
        job = self._latest_job()
        try:
            return job.wait(logs, echo=echo)
        except KeyboardInterrupt:
            echo(still_running(job.name))
            raise

    def _latest_job(self) -> TrainingJob:
        if self.latest_training_job is None:
            raise ValueError("Estimator is not associated with a training job: fit() or attach()")
        return self.latest_training_job

    @property
    def training_job_analytics(self) -> TrainingJobAnalytics:
        """The latest job's metrics; ``.dataframe()`` is a pandas DataFrame of them
        (``timestamp``, ``metric_name``, ``value``), as in the SageMaker SDK."""
        return TrainingJobAnalytics(self._latest_job().name, client=self.client)

    def _spec(self, inputs: Any, job_name: str | None) -> dict[str, Any]:
        spec = {key: value for key, value in self.spec.items() if value is not None}
        spec["inputs"] = channels(inputs, self.input_mode)
        if self.source_dir is None and self._stored_source is not None:
            spec["entry_point"] = self.entry_point
            spec["source_uri"] = self._stored_source
        else:
            source_dir, entry_point = self._code()
            spec["entry_point"] = entry_point
            spec["source_uri"] = self.client.upload_source(source_dir, entry_point=entry_point)
        if job_name:
            spec["name"] = job_name
            spec.pop("base_job_name", None)
        return spec

    @property
    def model_data(self) -> str | dict[str, Any] | None:
        """URI of the latest job's model.tar.gz once it has completed; where it was stored
        uncompressed (disable_output_compression), the prefix of its files as the SDK's
        ``model_data`` gives it, an S3DataSource of that prefix."""
        if self.latest_training_job is None:
            return None
        job = self.latest_training_job.latest()
        artifacts: str | None = job.get("model_artifacts")
        if artifacts is None or job["spec"].get("output_compression") != "NONE":
            return artifacts
        source = {"S3Uri": artifacts, "S3DataType": "S3Prefix", "CompressionType": "None"}
        return {"S3DataSource": source}

    def _code(self) -> tuple[Path, str]:
        if self.source_dir is not None:
            return self.source_dir, self.entry_point
        # As the SageMaker SDK does without source_dir: ship the entry point's directory.
        script = Path(self.entry_point)
        if not script.is_file():
            raise RunyardError(
                f"entry point {self.entry_point} does not exist (and no source_dir was given)"
            )
        return script.resolve().parent, script.name


def _tags(tags: list[dict[str, str]] | dict[str, str] | None) -> list[dict[str, str]]:
    """SageMaker's tags (``[{"Key": k, "Value": v}]`` or ``{k: v}``) in the API's words."""
    if isinstance(tags, Mapping):
        return [{"key": key, "value": value} for key, value in tags.items()]
    return [_lowercase_keys(tag) for tag in tags or []]


def _metric_definitions(
    definitions: list[dict[str, str]] | None,
) -> list[dict[str, str]] | None:
    """SageMaker's ``[{"Name": ..., "Regex": ...}]`` in the API's words."""
    return None if definitions is None else [_lowercase_keys(item) for item in definitions]


def _lowercase_keys(item: Mapping[str, Any]) -> dict[str, Any]:
    # "Key"/"Value" and "Name"/"Regex" are CreateTrainingJob's spelling; the API's fields
    # are the same words in lower case.
    return {key.lower(): value for key, value in item.items()}


def _tensorboard(config: Any) -> dict[str, str | None]:
    """The job's fields of a ``tensorboard_output_config``: the SageMaker SDK's
    ``TensorBoardOutputConfig`` (or a mapping of its two arguments' names)."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        s3_output_path = config.get("s3_output_path")
        local_path = config.get("container_local_output_path")
    else:
        s3_output_path = getattr(config, "s3_output_path", None)
        local_path = getattr(config, "container_local_output_path", None)
    if not s3_output_path:
        raise ValueError("tensorboard_output_config needs an s3_output_path")
    return {"tensorboard_s3_output_path": s3_output_path, "tensorboard_local_path": local_path}


__all__ = ["Estimator", "JobFailedError", "TrainingJob"]
