"""``smdistributed.dataparallel.torch.distributed``: SageMaker's process-group API (v1.3
and before), on Runyard's library and torch.distributed's default group.

Runyard's data-parallel API holds every name of SageMaker's (a few more besides), so this
module is Runyard's, re-exported whole, with SageMaker's ``init_process_group``: the one
name that means more here (``libraries.dataparallel.sagemaker`` says what).
"""

from libraries.dataparallel import *  # noqa: F403
from libraries.dataparallel import __all__ as __all__
from libraries.dataparallel.sagemaker import init_process_group as init_process_group
