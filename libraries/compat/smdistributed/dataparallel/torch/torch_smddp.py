"""Importing this registers the ``smddp`` backend, so that
``torch.distributed.init_process_group(backend="smddp")`` works, as with SageMaker's
library from v1.4 on."""

from libraries.dataparallel.smddp import SMDDP_BACKEND, register_smddp_backend

__all__ = ["SMDDP_BACKEND"]

register_smddp_backend()
