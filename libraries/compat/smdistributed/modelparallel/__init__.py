"""``smdistributed.modelparallel``: Runyard model parallel under SageMaker's names."""

from libraries.modelparallel import SAGEMAKER_VERSION as __version__  # noqa: F401
