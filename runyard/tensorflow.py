"""``runyard.tensorflow.TensorFlow``: ``sagemaker.tensorflow.TensorFlow``'s shape, on
Runyard. ``parameter_server`` and ``multi_worker_mirrored_strategy`` distributions set
``TF_CONFIG`` as SageMaker does.

TensorFlow(entry_point="train.py", role=role, framework_version="2.16", py_version="py310",
           instance_type="local", instance_count=2,
           distribution={"parameter_server": {"enabled": True}}).fit("data/")
"""

from __future__ import annotations

from typing import Any

from runyard.estimator import Estimator


class TensorFlow(Estimator):
    """An estimator for TensorFlow scripts; its positional arguments are SageMaker's.

    ``model_dir``, when given, reaches the script as the ``--model_dir`` argument, as in
    SageMaker; unlike SageMaker, none is made up when it is not given.
    """

    framework = "tensorflow"

    def __init__(
        self,
        py_version: str | None = None,
        framework_version: str | None = None,
        model_dir: str | None = None,
        image_uri: str | None = None,
        distribution: dict[str, Any] | None = None,
        *,
        entry_point: str,
        hyperparameters: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if model_dir:
            hyperparameters = {**(hyperparameters or {}), "model_dir": model_dir}
        super().__init__(
            entry_point,
            py_version=py_version,
            framework_version=framework_version,
            image_uri=image_uri,
            distribution=distribution,
            hyperparameters=hyperparameters,
            **kwargs,
        )


__all__ = ["TensorFlow"]
