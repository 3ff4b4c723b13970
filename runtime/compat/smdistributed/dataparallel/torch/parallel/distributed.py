"""``smdistributed.dataparallel.torch.parallel.distributed``, as SageMaker's announcement
imports it: the process-group API and DistributedDataParallel in one module."""

from runtime.dataparallel import DistributedDataParallel

# A facade: the process-group API is the sibling module's, re-exported whole.
from ..distributed import *  # noqa: F403
from ..distributed import __all__ as _PROCESS_GROUP_API

__all__ = [*_PROCESS_GROUP_API, "DistributedDataParallel"]
