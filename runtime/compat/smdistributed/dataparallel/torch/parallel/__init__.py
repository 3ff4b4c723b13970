"""``smdistributed.dataparallel.torch.parallel``: SageMaker's DistributedDataParallel."""

from runtime.dataparallel import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
