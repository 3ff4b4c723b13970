"""The names SageMaker's distributed transformer gives a GPT-2's parts, on transformers'
own modules.

Made for tensor parallelism (``smp.model_creation(tensor_parallelism=True)``,
``smp.tensor_parallelism()``), a transformers GPT-2 is replaced in SageMaker's library by
a transformer of its own, whose stack of blocks is ``transformer.seq_layers`` and whose
blocks hold ``attention`` and ``output``; scripts written for it reach the blocks by those
names (to checkpoint their activations, to put them on stages). Runyard keeps
transformers' modules, so it gives the same modules those names too: ``seq_layers`` is
the stack ``h``, a block's ``attention`` its ``attn`` and its ``output`` its ``mlp``.

The names are plain attributes, not registered submodules: a module is registered once,
under its own name, so parameter names, state_dicts and checkpoints stay transformers'.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

# transformers' GPT-2 (``GPT2Model``), by what it holds: its stack and its blocks' parts.
_STACK = "h"
_BLOCK_PARTS = {"attention": "attn", "output": "mlp"}
_SAGEMAKER_STACK = "seq_layers"


def give(model: nn.Module, marked: Mapping[int, bool]) -> list[str]:
    """Gives SageMaker's names to the GPT-2 transformers in ``model`` that are marked for
    tensor parallelism (``marked``: by module id), themselves or by their closest marked
    ancestor, as ``libraries.modelparallel.tensor`` reads marks; returns their paths."""
    named = []
    decided: dict[str, bool] = {}
    for path, module in model.named_modules():
        parent = path.rpartition(".")[0] if path else None
        on = marked.get(id(module), decided.get(parent, False) if parent is not None else False)
        decided[path] = on
        if on and _is_gpt2_transformer(module):
            stack = getattr(module, _STACK)
            object.__setattr__(module, _SAGEMAKER_STACK, stack)
            for block in stack:
                for name, part in _BLOCK_PARTS.items():
                    object.__setattr__(block, name, getattr(block, part))
            named.append(path)
    return named


def _is_gpt2_transformer(module: nn.Module) -> bool:
    # By name: the library does not import transformers, which a job may not have.
    if type(module).__name__ != "GPT2Model":
        return False
    stack = getattr(module, _STACK, None)
    return isinstance(stack, nn.ModuleList) and all(
        all(isinstance(getattr(block, part, None), nn.Module) for part in _BLOCK_PARTS.values())
        for block in stack
    )
