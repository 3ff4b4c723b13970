"""``smdistributed.modelparallel.torch.nn.huggingface``: ``libraries.modelparallel.nn.
huggingface``, re-exported."""

from libraries.modelparallel.nn.huggingface import *  # noqa: F403
from libraries.modelparallel.nn.huggingface import __all__ as __all__
