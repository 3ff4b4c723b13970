"""``smp.nn``: the layers SageMaker's library offers scripts in place of apex's.

``FusedLayerNorm`` is torch's own ``LayerNorm``, which already runs as one fused kernel
on CUDA. It is the class itself, not a subclass, because Runyard keeps a model's modules
as their library made them: a transformers model's layer norms are ``nn.LayerNorm``s, as
under SageMaker's distributed transformer they are ``FusedLayerNorm``s, so a script that
picks them out with ``isinstance(module, smp.nn.FusedLayerNorm)`` (to leave them out of
weight decay, say) finds the same modules.
"""

from __future__ import annotations

from torch.nn import LayerNorm as FusedLayerNorm

from libraries.modelparallel.nn import huggingface

__all__ = ["FusedLayerNorm", "huggingface"]
