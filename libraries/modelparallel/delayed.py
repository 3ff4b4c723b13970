"""Delayed parameter initialisation: a model made inside ``smp.delay_param_initialization()``
(or ``smp.model_creation()`` with the job's ``delayed_parameter_initialization``) gets its
parameters on torch's meta device, shapes without storage, so no process ever holds the
whole model. ``smp.DistributedModel`` then gives each rank storage for what it holds only
(its FSDP shards, or its pipeline stage's parameters) and fills it.

The values are those one process would have made: each module's ``reset_parameters()``
runs again, in the order the modules were made, on a full-size stand-in of that module's
own parameters, one module at a time, drawing random numbers on from the state the first
of them was made under (kept when its first parameter was registered: on the meta device,
initialisation draws none); a rank copies in the part it holds. Buffers are made as usual,
with their values.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.nn.modules.module import register_module_parameter_registration_hook

from libraries.modelparallel import marks
from libraries.modelparallel import state as smp_state

# The random state the first module each delayed creation made was made under.
_made_under: weakref.WeakKeyDictionary[nn.Module, torch.Tensor] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def delay_param_initialization(enabled: bool = True) -> Iterator[None]:
    """Modules made inside have their parameters on the meta device: no memory until
    smp.DistributedModel places and initialises them."""
    if not enabled:
        yield
        return
    first: list[nn.Module] = []

    def on_the_meta_device(module: nn.Module, _name: str, parameter: Any) -> Any:
        if parameter is None or parameter.is_meta:
            return None
        if not first:
            first.append(module)
            _made_under[module] = torch.random.get_rng_state()
        return nn.Parameter(torch.empty_like(parameter, device="meta"), parameter.requires_grad)

    handle = register_module_parameter_registration_hook(on_the_meta_device)
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def model_creation(
    tensor_parallelism: bool = False, dtype: torch.dtype | None = None, **_tensor_parallel: Any
) -> Iterator[None]:
    """SageMaker's context for making the model: parameters delayed as the job's
    ``delayed_parameter_initialization`` says, made in ``dtype`` where given, and split
    across the tensor-parallel group with ``tensor_parallelism``."""
    state = smp_state.current()
    default = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        with (
            delay_param_initialization(state.parameters.delayed_parameter_initialization),
            marks.tensor_parallelism() if tensor_parallelism else contextlib.nullcontext(),
        ):
            yield
    finally:
        torch.set_default_dtype(default)


def is_delayed(module: nn.Module) -> bool:
    return any(parameter.is_meta for parameter in module.parameters())


def move_buffers(module: nn.Module, device: torch.device) -> None:
    """Buffers to ``device``; parameters still on the meta device stay there."""
    for child in module.modules():
        for name, buffer in child.named_buffers(recurse=False):
            setattr(child, name, buffer.to(device))


def allocate(module: nn.Module, device: torch.device) -> None:
    """Storage (uninitialised) on ``device`` for the parameters on the meta device, each
    the same Parameter object as before (an optimizer may hold it already). A sharded
    parameter gets storage for its own shard only."""
    for child in module.modules():
        for parameter in child.parameters(recurse=False):
            if parameter.is_meta:
                made = nn.Parameter(torch.empty_like(parameter, device=device))
                made.requires_grad_(parameter.requires_grad)
                torch.utils.swap_tensors(parameter, made)  # type: ignore[no-untyped-call]


def initialise(module: nn.Module, holds: Callable[[nn.Parameter], bool]) -> None:
    """Fills the parameters this rank ``holds`` with the values one process would have
    made; the global random state is left as it was."""
    resumed = torch.random.get_rng_state()
    try:
        for name, child in module.named_modules():
            own = dict(child.named_parameters(recurse=False))
            if own:
                _initialise_one(name, child, own, holds)
    finally:
        torch.random.set_rng_state(resumed)


def _initialise_one(
    name: str,
    module: nn.Module,
    own: dict[str, nn.Parameter],
    holds: Callable[[nn.Parameter], bool],
) -> None:
    made_under = _made_under.get(module)
    if made_under is not None:
        torch.random.set_rng_state(made_under)
    reset = getattr(module, "reset_parameters", None)
    if not callable(reset):
        raise RuntimeError(
            f"delayed parameter initialisation: module {name or 'the model'} "
            f"({type(module).__name__}) has parameters but no reset_parameters() to make them"
        )
    # Every module's stand-in draws its random numbers, held here or not, so the next
    # module draws on from where this one ended, as when the model was made.
    whole = {key: nn.Parameter(torch.empty(p.shape, dtype=p.dtype)) for key, p in own.items()}
    try:
        for key, stand_in in whole.items():
            setattr(module, key, stand_in)
        with torch.no_grad():
            reset()
    finally:
        for key, parameter in own.items():
            setattr(module, key, parameter)
    with torch.no_grad():
        for key, parameter in own.items():
            if holds(parameter):
                _copy_held_part(parameter, whole[key].detach())


def _copy_held_part(parameter: nn.Parameter, whole: torch.Tensor) -> None:
    if isinstance(parameter, DTensor):
        # Every rank made the same whole tensor: each cuts its own shard, no exchange.
        part = distribute_tensor(
            whole, parameter.device_mesh, parameter.placements, src_data_rank=None
        )
        parameter.to_local().copy_(part.to_local())
    else:
        parameter.copy_(whole)
