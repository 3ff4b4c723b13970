"""``smdistributed.modelparallel.torch.nn``: ``libraries.modelparallel.nn``, re-exported."""

from libraries.modelparallel.nn import *  # noqa: F403
from libraries.modelparallel.nn import __all__ as __all__
