"""``@smp.step``: the script's step function, run once per microbatch.

Tensor arguments are split along their batch axis (0, or as ``input_split_axes`` says)
into ``microbatches`` parts (each rank its own samples, with tensor parallelism too:
``libraries.modelparallel.batches``); arguments
named in ``non_split_inputs`` and anything not a tensor reach every microbatch whole. What
the function returns comes back as ``StepOutput`` (one per returned value), holding every
microbatch's value.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from libraries.modelparallel import state as smp_state
from libraries.modelparallel.model import distributed_model
from libraries.modelparallel.pipeline import Probed


class StepOutput:
    """One returned value of a step, across its microbatches."""

    def __init__(self, outputs: Sequence[Any]) -> None:
        self.outputs = list(outputs)

    def reduce_mean(self) -> torch.Tensor:
        return torch.stack([_tensor(value) for value in self.outputs]).mean(dim=0)

    def reduce_sum(self) -> torch.Tensor:
        return torch.stack([_tensor(value) for value in self.outputs]).sum(dim=0)

    def concat(self) -> torch.Tensor:
        return torch.cat([_tensor(value) for value in self.outputs])

    def stack(self) -> torch.Tensor:
        return torch.stack([_tensor(value) for value in self.outputs])

    def __len__(self) -> int:
        return len(self.outputs)

    def __repr__(self) -> str:
        return f"StepOutput({len(self.outputs)} microbatches)"


def step(
    func: Callable[..., Any] | None = None,
    *,
    non_split_inputs: Sequence[str] | None = None,
    input_split_axes: Mapping[str, int] | None = None,
) -> Any:
    """``@smp.step`` or ``@smp.step(non_split_inputs=[...], input_split_axes={...})``."""
    if func is None:
        return functools.partial(
            step, non_split_inputs=non_split_inputs, input_split_axes=input_split_axes
        )
    signature = inspect.signature(func)
    whole = set(non_split_inputs or ())
    axes = dict(input_split_axes or {})

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        state = smp_state.current()
        count = state.parameters.microbatches
        bound = signature.bind(*args, **kwargs)
        parts = {
            name: [value] * count
            if name in whole
            else _split(value, count, axes.get(name, 0), name)
            for name, value in bound.arguments.items()
        }
        if state.topology.pp_size > 1:
            return _outputs(_pipelined(func, bound, parts, state))
        model = distributed_model(state)
        if model is None:
            raise RuntimeError("an smp.step function runs a model: wrap it in smp.DistributedModel")
        model.partitioned_now()
        results = []
        with model.stepping():
            for index in range(count):
                bound.arguments.update({name: values[index] for name, values in parts.items()})
                with model.microbatch(index, count):
                    results.append(func(*bound.args, **bound.kwargs))
        return _outputs(results)

    return run


def _pipelined(
    func: Callable[..., Any],
    bound: inspect.BoundArguments,
    parts: dict[str, list[Any]],
    state: smp_state.State,
) -> list[Any]:
    """One step through the pipeline stages (``libraries.modelparallel.pipeline``)."""
    model = distributed_model(state)
    if model is None:
        raise RuntimeError("an smp.step function runs a model: wrap it in smp.DistributedModel")
    count = state.parameters.microbatches

    def use(index: int) -> None:
        bound.arguments.update({name: values[index] for name, values in parts.items()})

    calls = []
    for index in range(count):
        use(index)
        try:
            with model.probing():
                func(*bound.args, **bound.kwargs)
        except Probed as probed:
            calls.append(probed.call)
        else:
            raise RuntimeError("the smp.step function never called its smp.DistributedModel")

    def replay(index: int, output: Any) -> tuple[Any, Any]:
        use(index)
        with model.replaying(output) as replayed:
            returned = func(*bound.args, **bound.kwargs)
        return replayed.loss, returned

    pipeline = model.build_pipeline(calls[0])
    model.partitioned_now()
    results = pipeline.run(calls, replay)
    if torch.is_grad_enabled():
        assert model.ties is not None
        model.ties.sum_gradients()
        model.average_gradients(pipeline.module)
    return results


def _split(value: Any, count: int, axis: int, name: str) -> list[Any]:
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        size = value.shape[axis]
        if size % count:
            raise ValueError(
                f"smp.step: argument {name!r} has {size} rows on axis {axis}, which "
                f"{count} microbatches do not divide"
            )
        return list(torch.tensor_split(value, count, dim=axis))
    if isinstance(value, list | tuple) and any(isinstance(v, torch.Tensor) for v in value):
        columns = [_split(item, count, axis, name) for item in value]
        return [type(value)(column[index] for column in columns) for index in range(count)]
    if isinstance(value, dict) and any(isinstance(v, torch.Tensor) for v in value.values()):
        split = {key: _split(item, count, axis, f"{name}[{key!r}]") for key, item in value.items()}
        return [{key: parts[index] for key, parts in split.items()} for index in range(count)]
    return [value] * count


def _outputs(results: list[Any]) -> Any:
    if results and isinstance(results[0], tuple):
        return tuple(StepOutput(column) for column in zip(*results, strict=True))
    return StepOutput(results)


def _tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    return torch.as_tensor(value)
