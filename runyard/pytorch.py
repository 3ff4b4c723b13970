"""``runyard.pytorch.PyTorch``: ``sagemaker.pytorch.PyTorch``'s shape, on Runyard.

PyTorch(entry_point="train.py", source_dir="src", role=role, framework_version="2.3",
        py_version="py311", instance_type="local", instance_count=2,
        distribution={"torch_distributed": {"enabled": True}}).fit({"train": "data/"})
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runyard.estimator import Estimator


class PyTorch(Estimator):
    """An estimator for PyTorch scripts; its positional arguments are SageMaker's."""

    framework = "pytorch"

    def __init__(
        self,
        entry_point: str,
        framework_version: str | None = None,
        py_version: str | None = None,
        source_dir: str | Path | None = None,
        hyperparameters: dict[str, Any] | None = None,
        image_uri: str | None = None,
        distribution: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            entry_point,
            framework_version=framework_version,
            py_version=py_version,
            source_dir=source_dir,
            hyperparameters=hyperparameters,
            image_uri=image_uri,
            distribution=distribution,
            **kwargs,
        )


__all__ = ["PyTorch"]
