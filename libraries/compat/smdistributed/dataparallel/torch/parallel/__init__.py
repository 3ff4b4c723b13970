"""``smdistributed.dataparallel.torch.parallel``: SageMaker's DistributedDataParallel."""

from libraries.dataparallel import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
