"""``smp.nn.huggingface``: moving a transformers model's state_dict to and from the form
SageMaker's library holds it in, family by family."""

from __future__ import annotations

from libraries.modelparallel.nn.huggingface import gpt2

__all__ = ["gpt2"]
