"""Each tensor-parallel rank's own samples, through blocks split across its group.

As in SageMaker's library with its defaults (``prescaled_batch`` off), every rank of a
tensor-parallel group is fed samples of its own, and what it holds whole (embeddings, the
output head, the loss) computes on them alone. A split block cannot: each rank holds only
its share of every projection, so the group computes each block together, on the group's
samples. On entry a split block joins its group's rows (``join_rows``) of every argument
that has the rank's batch size (the hidden states, and the attention masks, rotary angles,
positions or encoder states a block takes); on exit each rank keeps its own rows of what
the block returns (``own_rows``). With ``prescaled_batch`` the ranks of a group are fed
the same batch, and nothing is joined.

Backward: ``join_rows`` (an all-gather) passes on this rank's rows of the joined input's
gradient, which is already the group's: inside a split block every path from an input to
the output goes through a sum over the group (a column share's ``copy_to_group``, or the
residual through ``own_rows``). ``own_rows`` (a slice) passes on the group's gradients
joined: each rank's copy of the block's output feeds only the loss of its own rows.

So parameters see different batches: a split block's (its shares, and its whole norms)
the gradient of the sum of the group's losses, the others the gradient of the rank's own
loss. ``average_gradients`` turns both into the gradient of the mean loss over the global
batch, as one process computes it.

The operators are registered with ``torch.library`` so that the trace of a pipeline's
stages (``stage_split``) keeps them; they name their group by a key (``key_of``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from libraries.modelparallel import gradients
from libraries.modelparallel import state as smp_state

# The tensor-parallel groups the operators communicate over, by a key a traced graph can hold.
GROUPS: dict[str, dist.ProcessGroup] = {}
# The attribute of a joined block that holds its group's key.
GROUP_KEY = "_runyard_tensor_parallel_group"


def key_of(group: dist.ProcessGroup) -> str:
    """The key the operators name ``group`` by (the same for one group every time)."""
    for key, known in GROUPS.items():
        if known is group:
            return key
    key = f"tp{len(GROUPS)}"
    GROUPS[key] = group
    return key


def _place(group: str) -> tuple[int, int]:
    """(this rank's place in the group, the group's size)."""
    known = GROUPS[group]
    return dist.get_rank(known), dist.get_world_size(known)


def _gather(value: torch.Tensor, group: str) -> torch.Tensor:
    _, size = _place(group)
    # gloo gathers no bool tensors (attention masks): their bytes travel instead.
    sent = value.view(torch.uint8) if value.dtype == torch.bool else value
    parts = [torch.empty_like(sent) for _ in range(size)]
    dist.all_gather(parts, sent.contiguous(), group=GROUPS[group])
    joined = torch.cat(parts)
    return joined.view(torch.bool) if value.dtype == torch.bool else joined


@torch.library.custom_op("runyard_mp::join_rows", mutates_args=())
def join_rows(value: torch.Tensor, group: str) -> torch.Tensor:
    """The group's rows of ``value`` along its first axis, in the group's rank order."""
    return _gather(value, group)


@join_rows.register_fake
def _joined_shape(value: torch.Tensor, group: str) -> torch.Tensor:
    _, size = _place(group)
    return value.new_empty((value.shape[0] * size, *value.shape[1:]))


def _join_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.group = inputs[1]


def _join_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    rank, size = _place(ctx.group)
    return grad.chunk(size)[rank].contiguous(), None


join_rows.register_autograd(_join_backward, setup_context=_join_context)


@torch.library.custom_op("runyard_mp::own_rows", mutates_args=())
def own_rows(value: torch.Tensor, group: str) -> torch.Tensor:
    """This rank's rows of ``value``, which holds the group's (``join_rows``'s order)."""
    rank, size = _place(group)
    return value.chunk(size)[rank].clone(memory_format=torch.contiguous_format)


@own_rows.register_fake
def _own_shape(value: torch.Tensor, group: str) -> torch.Tensor:
    _, size = _place(group)
    return value.new_empty((value.shape[0] // size, *value.shape[1:]))


def _own_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    return _gather(grad, ctx.group), None


own_rows.register_autograd(_own_backward, setup_context=_join_context)


def join_batches(block: nn.Module, group: str) -> None:
    """Makes ``block`` compute on its group's rows and return this rank's own. Its class
    becomes a subclass of its own whose ``forward`` joins and splits around the block's
    (as FSDP's ``fully_shard`` does): the join is then part of the block wherever it
    runs, in a pipeline stage's trace or in the recomputation of a checkpointed block."""
    setattr(block, GROUP_KEY, group)
    block.__class__ = _joined_class(type(block))


_JOINED: dict[type, type] = {}


# The attribute of a joined block's class that holds the block's own class.
_OWN_CLASS = "_runyard_own_class"


def _joined_class(kind: type) -> type:
    if kind not in _JOINED:
        members = {"forward": _joined_forward, _OWN_CLASS: kind}
        _JOINED[kind] = type(kind.__name__, (kind,), members)
    return _JOINED[kind]


def _joined_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    group = getattr(self, GROUP_KEY)
    # The block's own forward, named by its class: FSDP may have subclassed the block's
    # class again since.
    own_forward = functools.partial(getattr(self, _OWN_CLASS).forward, self)
    rows = _batch_size(args, kwargs)
    if rows is None:
        return own_forward(*args, **kwargs)
    _, size = _place(group)

    def joined(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and _per_sample(value, rows):
            return join_rows(value, group)
        return _each(value, joined)

    def own(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == rows * size:
            return own_rows(value, group)
        return _each(value, own)

    returned = own_forward(*joined(args), **joined(kwargs))
    return own(returned)


def _batch_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """Rows of the block's first tensor argument (its hidden states)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    return None


def _per_sample(value: torch.Tensor, rows: int) -> bool:
    """A tensor of one row per sample: two or more axes (a one-axis argument such as a
    cache position is not per sample), the first of the batch's size. A broadcast one
    (a mask or angles of one row for every sample) stays as it is."""
    return value.dim() > 1 and value.shape[0] == rows


def _each(value: Any, change: Any) -> Any:
    """``value`` with ``change`` applied to the items of a plain tuple, list or dict;
    anything else (a cache, a config) as it is."""
    if type(value) in (tuple, list):
        return type(value)(change(item) for item in value)
    if type(value) is dict:
        return {key: change(item) for key, item in value.items()}
    return value


def inside(name: str, blocks: Iterable[str]) -> bool:
    """Whether parameter ``name`` belongs to one of the split ``blocks`` (by name; "" for
    a model that is itself a block)."""
    return any(not block or name.startswith(f"{block}.") for block in blocks)


def average_gradients(
    named: Iterable[tuple[str, nn.Parameter]], blocks: Iterable[str], *, reduced: bool = False
) -> None:
    """Gradients of the mean loss over the global batch, from what each rank computed.

    Without ``prescaled_batch``: over the d data-parallel ranks of the global batch, each
    rank's own parameters saw its loss (whole ones: summed over the data-parallel group);
    a split block's the sum of its tensor-parallel group's (summed over the ranks that
    hold the same share, the reduced data-parallel group). Both are divided by d. With
    ``prescaled_batch`` every rank of a group computed its loss on the group's batch:
    the mean over the reduced data-parallel group. ``reduced``: the states are sharded,
    and FSDP already took the mean over the reduced data-parallel group."""
    state = smp_state.current()
    topology = state.topology
    parameters = list(named)
    if state.parameters.prescaled_batch or topology.tp_size == 1:
        if not reduced:
            gradients.average([p for _, p in parameters], state.rdp_group, topology.rdp_size)
        return
    names = list(blocks)
    # A split block's parameters (its shares and its whole norms alike) computed on the
    # group's rows, the others on the rank's own.
    on_group_rows = [parameter for name, parameter in parameters if inside(name, names)]
    on_own_rows = [parameter for name, parameter in parameters if not inside(name, names)]
    if reduced:
        gradients.average(on_group_rows, state.rdp_group, 1, divisor=topology.tp_size)
        assert state.tp_group is not None
        gradients.average(on_own_rows, state.tp_group, topology.tp_size)
        return
    size = topology.dp_size
    gradients.average(on_group_rows, state.rdp_group, topology.rdp_size, divisor=size)
    gradients.average(on_own_rows, state.dp_group, size)
