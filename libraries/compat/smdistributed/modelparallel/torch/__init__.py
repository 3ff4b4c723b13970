"""``smdistributed.modelparallel.torch``: SageMaker's model-parallel API (v1) on
``libraries.modelparallel``, re-exported whole, with its ``nn`` (``smp.nn``)."""

from libraries.modelparallel import *  # noqa: F403
from libraries.modelparallel import __all__ as __all__

from . import nn as nn
