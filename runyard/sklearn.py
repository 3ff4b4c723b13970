"""``runyard.sklearn.SKLearn``: ``sagemaker.sklearn.SKLearn``'s shape, on Runyard.

SKLearn(entry_point="train.py", role=role, framework_version="1.2-1",
        instance_type="local", hyperparameters={"epochs": 1}).fit({"train": "data/"})
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runyard.estimator import Estimator
from runyard.inputs import note_unused


class SKLearn(Estimator):
    """An estimator for scikit-learn scripts; its positional arguments are SageMaker's.

    As SageMaker's, it runs on one instance, in Python 3 (``py_version="py3"``); the
    version is scikit-learn's images' (``"1.2-1"``), or an ``image_uri`` names the image.
    """

    framework = "sklearn"

    def __init__(
        self,
        entry_point: str,
        framework_version: str | None = None,
        py_version: str | None = "py3",
        source_dir: str | Path | None = None,
        hyperparameters: dict[str, Any] | None = None,
        image_uri: str | None = None,
        image_uri_region: str | None = None,
        **kwargs: Any,
    ) -> None:
        # As SageMaker's SKLearn says: the image is named by a version or by its name.
        if framework_version is None and image_uri is None:
            raise ValueError("framework_version or image_uri is required")
        if py_version not in (None, "py3"):
            raise ValueError("scikit-learn images run Python 3: give py_version='py3'")
        if kwargs.setdefault("instance_count", 1) != 1:
            raise ValueError("scikit-learn trains on one instance: give instance_count=1")
        note_unused("SKLearn", image_uri_region=image_uri_region)
        super().__init__(
            entry_point,
            framework_version=framework_version,
            py_version=py_version,
            source_dir=source_dir,
            hyperparameters=hyperparameters,
            image_uri=image_uri,
            **kwargs,
        )


__all__ = ["SKLearn"]
