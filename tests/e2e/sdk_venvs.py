"""Virtual environments with a SageMaker Python SDK (v2 or v3) from PyPI, under
``build/sdk-venvs`` (made once, see tests.venvs)."""

from __future__ import annotations

from pathlib import Path

from tests.venvs import BUILD, made_once

# Each generation, as pip is asked for it. v2's also runs the SDK's own tests
# (test_sagemaker_sdk_suite.py): they need pytest 7 (pytest 8 refuses their marked
# fixtures), and of the SDK's test extra what the training tests import (docker's client
# in a conftest, awslogs and stopit in their timeouts), as that extra pins them.
REQUIREMENTS = {
    "v2": ["sagemaker>=2.257,<3", "pytest>=7,<8", "docker>=7", "awslogs==0.14.0", "stopit==1.1.2"],
    "v3": ["sagemaker>=3"],
}


def sdk_python(generation: str) -> Path:
    """The interpreter of the virtual environment with that SDK generation."""
    return made_once(BUILD / "sdk-venvs" / generation, REQUIREMENTS[generation])
