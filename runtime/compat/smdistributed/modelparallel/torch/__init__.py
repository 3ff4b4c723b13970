"""``smdistributed.modelparallel.torch``: SageMaker's model-parallel API (v1) on
``runtime.modelparallel``, re-exported whole."""

from runtime.modelparallel import *  # noqa: F403
from runtime.modelparallel import __all__ as __all__
