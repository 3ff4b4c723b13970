"""``smdistributed.dataparallel.torch.parallel.distributed``, as SageMaker's announcement
imports it: the process-group API and DistributedDataParallel in one module, which the
sibling ``distributed`` module already is."""

from ..distributed import *  # noqa: F403
from ..distributed import __all__ as __all__
from ..distributed import init_process_group as init_process_group
