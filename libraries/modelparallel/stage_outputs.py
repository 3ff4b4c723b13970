"""What a model in pipeline stages is called with, and what its stages carry of what it
returns.

torch's stages pass tensors on, and ``torch.export``, which traces the model for the split,
takes as outputs only tensors in containers it knows (tuples, lists, dicts, transformers'
``ModelOutput``s). A model as its library builds it returns more: every transformers
language model's default configuration has ``use_cache`` on, so its forward returns a
key/value cache (``DynamicCache``, an object export does not know) beside the loss and
logits. Runyard decides, for every pipelined call, without asking the script to change a
setting:

- **No key/value cache.** The stages run the model's forward with ``use_cache=False``
  wherever the forward takes that argument (whatever the configuration or the call says):
  a cache serves generation, where each call extends the last one's; a training step calls
  the model once per microbatch and reads no cache, and holding one would only keep every
  block's keys and values alive past its stage. transformers makes the same choice where
  its own gradient checkpointing meets a training forward, and SageMaker's GPT-2 example
  (``train_gpt_simple.py``) builds its configuration with ``use_cache=False``: here the
  library does it, so a script need not. The output holds no cache (transformers' field
  ``cache``, formerly ``past_key_values``). The script's configuration is left as it is.
- **Tensors cross stages; the rest is kept from the trace.** Of what the model returns,
  the tensors are what the stages carry; any other value in it (None, a number, a string:
  a ``ModelOutput``'s optional fields) comes back on the last stage as the trace saw it,
  and an object the stages cannot carry (a cache of a model whose forward takes no
  ``use_cache``) comes back as None, named once in the job's log. The step function gets
  the model's own structure (``out["loss"]``, ``out.logits``).

Layouts without pipeline stages run the model eagerly, as one process does: nothing here
applies to them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

# The argument that turns a transformers model's key/value cache on or off.
CACHE_ARGUMENT = "use_cache"
# Values the last stage can give back as the trace saw them: they do not change per call.
CONSTANTS = (type(None), bool, int, float, str, torch.dtype, torch.device)


def takes_cache_argument(forward: Callable[..., Any]) -> bool:
    """Whether ``forward`` names ``use_cache`` among its arguments (a model that merely
    takes ``**kwargs`` could hand it to modules that do not know it)."""
    try:
        return CACHE_ARGUMENT in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def without_cache(
    forward: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call ``forward(*args, **kwargs)`` with the key/value cache off, where ``forward``
    takes ``use_cache`` (passed by position or by name, or not at all)."""
    if not takes_cache_argument(forward):
        return tuple(args), dict(kwargs)
    try:
        bound = inspect.signature(forward).bind_partial(*args, **kwargs)
    except TypeError:
        return tuple(args), {**kwargs, CACHE_ARGUMENT: False}
    bound.arguments[CACHE_ARGUMENT] = False
    return tuple(bound.args), dict(bound.kwargs)


@dataclass(frozen=True)
class Returned:
    """The structure of what the model returns, which of its leaves are tensors (what the
    stages carry, in order), and the others' values as the trace saw them."""

    spec: pytree.TreeSpec
    # One per leaf: True where a tensor goes, else False and ``kept`` holds its value.
    is_tensor: tuple[bool, ...]
    kept: tuple[Any, ...]
    # Where in the output each object the stages could not carry was (given back as None).
    dropped: tuple[str, ...]

    @classmethod
    def of(cls, returned: Any) -> tuple[Returned, tuple[torch.Tensor, ...]]:
        """What the stages carry of ``returned`` (its tensors) and how to rebuild it."""
        paths_and_leaves, spec = pytree.tree_flatten_with_path(returned)
        is_tensor: list[bool] = []
        kept: list[Any] = []
        dropped: list[str] = []
        tensors: list[torch.Tensor] = []
        for path, leaf in paths_and_leaves:
            tensor = isinstance(leaf, torch.Tensor)
            is_tensor.append(tensor)
            if tensor:
                tensors.append(leaf)
                kept.append(None)
            elif isinstance(leaf, CONSTANTS):
                kept.append(leaf)
            else:
                kept.append(None)
                dropped.append(f"{pytree.keystr(path) or 'the output'} ({type(leaf).__name__})")
        made = cls(spec, tuple(is_tensor), tuple(kept), tuple(dropped))
        return made, tuple(tensors)

    @property
    def tensor_count(self) -> int:
        return sum(self.is_tensor)

    def rebuilt(self, tensors: Any) -> Any:
        """The model's output, from the tensors the last stage gives (one tensor alone,
        or a sequence of them)."""
        given = iter((tensors,) if isinstance(tensors, torch.Tensor) else tensors)
        leaves = [
            next(given) if tensor else kept
            for tensor, kept in zip(self.is_tensor, self.kept, strict=True)
        ]
        return pytree.tree_unflatten(leaves, self.spec)
