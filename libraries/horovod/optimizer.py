"""``hvd.DistributedOptimizer``: the script's optimizer, stepping on gradients averaged
over every process.

The object returned is of a subclass of the optimizer's own class (so ``isinstance`` and
LR schedulers see what they expect) and starts with the same parameter groups, state and
hooks. ``step()`` first waits for the gradients' reductions (started during backward,
gradients.py), then steps as the optimizer would. As in Horovod:
``synchronize()`` finishes the reductions early (to clip the averaged gradients, say),
after which ``with optimizer.skip_synchronize(): optimizer.step()`` steps without
reducing again; ``zero_grad()`` between ``backward()`` and ``step()`` is refused.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from libraries.horovod import ops, process_sets
from libraries.horovod.compression import Compression, Compressor
from libraries.horovod.gradients import GradientReducer
from libraries.horovod.ops import ReduceOp

_subclasses: dict[type[torch.optim.Optimizer], type[torch.optim.Optimizer]] = {}


class _Averaging:
    """Mixed in before the optimizer's class."""

    _reducer: GradientReducer
    _synchronized: bool
    _skip_synchronize: bool

    def synchronize(self) -> None:
        self._reducer.synchronize()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        self._skip_synchronize = True
        try:
            yield
        finally:
            self._skip_synchronize = False

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        # After synchronize() the gradients are averaged already: they are not reduced
        # twice (which with op=hvd.Sum would change them), whether or not the step is
        # inside skip_synchronize().
        if not self._skip_synchronize and not self._synchronized:
            self._reducer.synchronize()
        self._synchronized = False
        return super().step(closure)  # type: ignore[misc]

    # torch wraps an optimizer class's step() for its step hooks and profiler once per
    # class (Optimizer._patch_step_function, again in load_state_dict). The base class's
    # step is wrapped already and runs the hooks; wrapping this one too would run them
    # twice.
    step.hooked = True  # type: ignore[attr-defined]

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._reducer.started:
            raise RuntimeError(
                "optimizer.zero_grad() was called after loss.backward() and before "
                "optimizer.step() or optimizer.synchronize(): the gradients being averaged "
                "would be lost. Call it before backward, or after step"
            )
        super().zero_grad(set_to_none)  # type: ignore[misc]


def DistributedOptimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Iterable[tuple[str, torch.nn.Parameter]] | None = None,
    compression: type[Compressor] | Compressor = Compression.none,
    backward_passes_per_step: int = 1,
    op: int = ReduceOp.AVERAGE,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    sparse_as_dense: bool = False,
    process_set: object = None,
) -> torch.optim.Optimizer:
    """``num_groups`` and ``groups`` (Horovod's hints for fusing allreduces) are accepted
    and change nothing: gradients are fused by size (gradients.py)."""
    process_sets.check(process_set)
    chosen = ops.resolve(op)
    if chosen not in (ReduceOp.AVERAGE, ReduceOp.SUM):
        raise ValueError(f"op must be hvd.Average or hvd.Sum for gradients, not {chosen.name}")
    if gradient_predivide_factor != 1.0 and chosen is not ReduceOp.AVERAGE:
        raise ValueError("gradient_predivide_factor needs op=hvd.Average")
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step} must be >= 1")
    params = _trained_parameters(optimizer)
    if named_parameters is not None:
        _check_names(list(named_parameters), params)
    wrapped = _subclass(type(optimizer)).__new__(_subclass(type(optimizer)))
    # The optimizer's own attributes, shared, except a step() an LR scheduler set on that
    # object (it would step the original class, without averaging).
    wrapped.__dict__.update({k: v for k, v in optimizer.__dict__.items() if k != "step"})
    reducer = GradientReducer(
        params,
        compression=compression,
        op=chosen,
        backward_passes_per_step=backward_passes_per_step,
        gradient_predivide_factor=gradient_predivide_factor,
        sparse_as_dense=sparse_as_dense,
    )
    wrapped.__dict__.update(_reducer=reducer, _synchronized=False, _skip_synchronize=False)
    return wrapped


def _subclass(kind: type[torch.optim.Optimizer]) -> type[torch.optim.Optimizer]:
    if kind not in _subclasses:
        _subclasses[kind] = type(kind.__name__, (_Averaging, kind), {"__module__": kind.__module__})
    return _subclasses[kind]


def _trained_parameters(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    found: dict[int, torch.nn.Parameter] = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.requires_grad:
                found.setdefault(id(param), param)
    return list(found.values())


def _check_names(
    named: list[tuple[str, torch.nn.Parameter]], params: list[torch.nn.Parameter]
) -> None:
    repeated = sorted(name for name, count in Counter(n for n, _ in named).items() if count > 1)
    if repeated:
        raise ValueError(f"named_parameters names more than one parameter {repeated}")
    known = {id(param) for _, param in named}
    unnamed = [param for param in params if id(param) not in known]
    if unnamed:
        raise ValueError(
            f"named_parameters leaves out {len(unnamed)} of the optimizer's parameters "
            f"(shapes {[tuple(param.shape) for param in unnamed[:5]]}): pass "
            "model.named_parameters() of the model the optimizer trains"
        )
