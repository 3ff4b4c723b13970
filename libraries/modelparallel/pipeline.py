"""Pipeline stages (``partitions`` > 1) on torch.distributed.pipelining.

At a job's first step the model is split at module boundaries (``partition``) by torch's
``pipeline()``, which traces the model with the first microbatch's arguments; each rank
builds its own stage, and a schedule runs the microbatches: ``ScheduleGPipe`` for
SageMaker's ``simple`` pipeline (every forward, then every backward), ``Schedule1F1B``
for ``interleaved`` (forwards and backwards alternate once the pipeline is full).

torch's schedules end each microbatch with a loss function; a SageMaker script's step
function computes its loss itself, around the model's call. The bridge: the last stage's
loss function runs the script's step function for that microbatch with the model's call
returning the stage's output, and returns the loss the script gave ``model.backward``.
The first stage learns what the model is called with the same way, by running the step
function up to the model's call ("probing"). What the step function returned is sent from
the last stage to the others, so every rank's ``StepOutput`` holds it.

Models come as their library builds them: a transformers model with its key/value cache
on and a ``ModelOutput`` to return. Stages carry tensors only; how the model is called in
them (without its cache) and how its output is rebuilt on the last stage is
``stage_outputs``'s to decide.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import fx, nn
from torch.distributed._composable.checkpoint_activation import (
    checkpoint as checkpoint_activations,
)
from torch.distributed.pipelining import Pipe, Schedule1F1B, ScheduleGPipe, SplitPoint, pipeline
from torch.distributed.pipelining.microbatch import _CustomReducer

from libraries.modelparallel import state as smp_state
from libraries.modelparallel.activations import offloaded
from libraries.modelparallel.calls import ModelCall
from libraries.modelparallel.precision import autocast
from libraries.modelparallel.splits import split_points
from libraries.modelparallel.stage_outputs import Returned, without_cache
from libraries.modelparallel.ties import Tie, ties_of


class Probed(Exception):
    """Raised by the model's call while probing: the step function goes no further."""

    def __init__(self, call: ModelCall) -> None:
        super().__init__("probed")
        self.call = call


def shapes(call: ModelCall) -> tuple[Any, ...]:
    """What a stage's buffers depend on: the shapes and types of the model's arguments.
    torch's stages size their receive buffers once, from the call they were traced with,
    so a call of other shapes (a held-out batch of another size) needs stages of its own."""

    def of(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return (tuple(value.shape), value.dtype)
        return type(value).__name__

    return (
        tuple(of(value) for value in call.args),
        tuple(sorted((key, of(value)) for key, value in call.kwargs.items())),
    )


def agreed_split_points(module: nn.Module, state: smp_state.State, example: ModelCall) -> list[str]:
    """Where the stages begin, decided by one rank: measured forward times differ from
    rank to rank, and every replica's stages must hold the same blocks for their
    gradients to be averaged."""
    # A split model's forward sums over its tensor-parallel group: rank 0's whole group
    # measures with it.
    deciders = state.topology.tp_group(0, 0) if state.tp_group is not None else [0]
    measures = state.rank in deciders
    decided = [
        split_points(
            module,
            state.parameters,
            state.topology.pp_size,
            example,
            state.partitions,
            state.say_once,
        )
        if measures
        else None
    ]
    dist.broadcast_object_list(decided, src=0)
    points: list[str] = decided[0]  # type: ignore[assignment]
    state.say_once(f"pipeline stages begin at: {', '.join(points)}")
    return points


class Pipeline:
    def __init__(
        self, module: nn.Module, state: smp_state.State, example: ModelCall, points: list[str]
    ) -> None:
        parameters = state.parameters
        self.points = points
        self._signature = inspect.signature(module.forward)
        # Traced as it runs: under bf16/fp16 autocast the stages send low-precision
        # activations, and their receive buffers are sized and typed from the trace.
        with autocast(state):
            pipe, self._output = split(module, self._positional(example), points)
        for dropped in self._output.dropped:
            state.say_once(
                f"the model's output holds {dropped}, which pipeline stages do not carry: "
                "the step function gets None there"
            )
        self.ties: list[Tie] = ties_of(module, pipe)
        self.stage = pipe.build_stage(state.pp_rank, state.device, group=state.stage_group)
        _checkpoint_traced(module, self.stage.submod, state.checkpointed)
        self._model_inputs = _model_inputs_of_stage(pipe, state.pp_rank, self.stage.submod)
        kind = ScheduleGPipe if parameters.pipeline == "simple" else Schedule1F1B
        self.schedule = kind(
            self.stage,
            n_microbatches=parameters.microbatches,
            loss_fn=self._loss,
            output_merge_spec=self._dropped_outputs(),
        )
        self.is_first = state.pp_rank == 0
        self.is_last = state.pp_rank == state.topology.pp_size - 1
        self._replay: Callable[[int, Any], Any] | None = None

    @property
    def module(self) -> nn.Module:
        """This rank's stage: its share of the model's modules, under their own names."""
        submodule: nn.Module = self.stage.submod
        return submodule

    def run(self, calls: list[ModelCall], replay: Callable[[int, Any], Any]) -> list[Any]:
        """One step over the microbatches whose model calls are ``calls``; on the last
        stage ``replay(index, output)`` runs the step function for microbatch ``index``
        and returns (its loss, what it returned). Returns what each microbatch's step
        function returned, on every stage."""
        self._replay = replay
        self._results: dict[int, Any] = {}
        calls = [self._positional(call) for call in calls]
        inputs = {}
        if self.is_first:
            args, kwargs = _whole_batch(calls)
            given = [*args, *kwargs.values()]
            inputs = {name: given[index] for name, index in self._model_inputs.items()}
        count = len(calls)
        target = torch.arange(count).view(count, 1) if self.is_last else None
        training = torch.is_grad_enabled()
        run = self.schedule.step if training else self.schedule.eval
        state = smp_state.current()
        with autocast(state), offloaded(state):
            run(target=target, **inputs)
        results = [self._results.get(index) for index in range(count)]
        return _from_last_stage(results)

    def _positional(self, call: ModelCall) -> ModelCall:
        """The call with its keyword arguments passed by position where the model's
        ``forward`` allows it, as it was traced."""
        try:
            bound = self._signature.bind(*call.args, **call.kwargs)
        except TypeError:
            return call
        return ModelCall(tuple(bound.args), dict(bound.kwargs))

    def _dropped_outputs(self) -> Any:
        """How the schedule merges the microbatches' outputs: it need not, since each
        microbatch's step function runs on its own output; a loss (a scalar) could not
        be concatenated anyway."""
        leaves = self._output.tensor_count
        dropped = [
            _CustomReducer(None, lambda _merged, _value: None)  # type: ignore[no-untyped-call]
            for _ in range(leaves)
        ]
        return dropped[0] if leaves == 1 else tuple(dropped)

    def _loss(self, output: Any, target: torch.Tensor) -> torch.Tensor:
        assert self._replay is not None
        index = int(target.item())
        loss, returned = self._replay(index, self._output.rebuilt(output))
        self._results[index] = _detached(returned)
        if loss is None:
            # A step that calls no model.backward (an evaluation step): its first output.
            loss = returned[0] if isinstance(returned, tuple) else returned
        return loss  # type: ignore[no-any-return]


def split(module: nn.Module, example: ModelCall, points: list[str]) -> tuple[Pipe, Returned]:
    """The model traced with ``example`` and cut into stages that begin at ``points``,
    and what the model returns, as the stages carry it (``stage_outputs``): its tensors,
    flattened."""
    own_forward = module.__dict__.get("forward")  # one the script set, if any
    output: list[Returned] = []
    try:
        _pass_inputs_through_the_first_stage(module, output)
        pipe = pipeline(
            module,
            mb_args=example.args,
            mb_kwargs=example.kwargs,
            split_spec=dict.fromkeys(points, SplitPoint.BEGINNING),
        )
    finally:
        _unmark(module, points)
        module.__dict__.pop("forward", None)
        if own_forward is not None:
            module.forward = own_forward
    _sent_contiguous(pipe)
    return pipe, output[0]


def _sent_contiguous(pipe: Pipe) -> None:
    """Makes what stages pass on tensors of their own, contiguous layout: a stage may pass
    on a view (an encoder-decoder's attention mask, expanded over the decoder's
    positions), which gloo refuses to send, and torch's stages make their receive
    buffers in the layout the trace saw."""
    for stage in range(pipe.num_stages):
        module = pipe.get_stage_module(stage)
        assert isinstance(module, fx.GraphModule)
        if stage:
            for node in module.graph.nodes:
                if node.op == "placeholder" and _is_view(node):
                    node.meta["val"] = node.meta["val"].contiguous()
        if stage < pipe.num_stages - 1:
            _contiguous_outputs(module)


def _contiguous_outputs(module: fx.GraphModule) -> None:
    graph = module.graph
    (returned,) = [node for node in graph.nodes if node.op == "output"]

    def contiguous(node: fx.Node) -> fx.Node:
        if not _is_view(node):
            return node
        with graph.inserting_before(returned):
            made = graph.call_method("contiguous", (node,))
        # torch's stage sizes its sends, and the gradients it receives, from this.
        made.meta["val"] = node.meta["val"].contiguous()
        return made

    returned.args = fx.node.map_arg(returned.args, contiguous)
    module.recompile()


def _is_view(node: fx.Node) -> bool:
    """Whether the traced value of ``node`` is a tensor laid out other than contiguously."""
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and not value.is_contiguous()


Released = list[tuple[nn.Parameter, torch.Size]]


def release_others(module: nn.Module, stage: nn.Module) -> Released:
    """Frees the storage of the parameters other stages hold: this rank never computes
    with, nor steps, them, and a model split for not fitting one device must not stay
    whole on each. Returns them with their shapes, for ``held_again``."""
    own = {id(parameter) for parameter in stage.parameters()}
    released = []
    for parameter in module.parameters():
        if id(parameter) not in own and parameter.numel():
            released.append((parameter, parameter.shape))
            parameter.data = parameter.data.new_empty(0)
    return released


@contextlib.contextmanager
def held_again(released: Released) -> Iterator[None]:
    """Storage (uninitialised) for the released parameters while the model is traced
    again for calls of another shape: the trace needs their shapes, not their values."""
    for parameter, shape in released:
        parameter.data = parameter.data.new_empty(shape)
    try:
        yield
    finally:
        for parameter, _ in released:
            parameter.data = parameter.data.new_empty(0)


def _checkpoint_traced(module: nn.Module, stage: nn.Module, checkpointed: list[nn.Module]) -> None:
    """Recomputes in the backward pass the activations of the stage's modules that stand
    for the model's checkpointed ones: a traced stage runs its own copies of the model's
    modules (under the same names), not the model's, so their marks do not carry over."""
    names = {id(each): name for name, each in module.named_modules()}
    for original in checkpointed:
        name = names.get(id(original))
        if not name:
            continue
        try:
            traced = stage.get_submodule(name)
        except AttributeError:
            continue  # on another stage
        checkpoint_activations(traced)


def _pass_inputs_through_the_first_stage(module: nn.Module, output: list[Returned]) -> None:
    """Makes the model, while it is traced, copy each tensor it is called with first: a
    later stage then receives from the stage before it what it needs of the model's
    inputs (an attention mask, the labels of a loss computed in the model), as torch's
    stages can take the model's own inputs only on the first stage. The model runs
    without its key/value cache and returns its tensors only; how to rebuild what it
    returned is kept in ``output`` (``stage_outputs``)."""
    own_forward = module.__dict__.get("forward")  # one the script set, if any
    plain_forward = own_forward or functools.partial(type(module).forward, module)

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        def copied(value: Any) -> Any:
            return value.clone() if isinstance(value, torch.Tensor) else value

        called_args, called_kwargs = without_cache(
            plain_forward,
            tuple(copied(value) for value in args),
            {key: copied(value) for key, value in kwargs.items()},
        )
        returned, tensors = Returned.of(plain_forward(*called_args, **called_kwargs))
        output[:] = [returned]
        # Each output taken once more after the model's last module, so on the last
        # stage: torch's stages give back only the last one's outputs, and an output
        # made earlier (an encoder's last hidden state) must reach it.
        return tuple(tensor.view_as(tensor) for tensor in tensors)

    module.forward = types.MethodType(forward, module)


def _model_inputs_of_stage(pipe: Pipe, stage: int, module: nn.Module) -> dict[str, int]:
    """Which of the model's inputs the stage takes, by the name its traced graph gives
    each, with the input's place among the model's (positional arguments, then keyword
    ones): the trace may drop an input or take one tensor passed twice once (``labels``
    that are the ``input_ids``), so the stage's inputs are not the model's in order."""
    graph = pipe.split_gm.graph
    model_inputs = [node for node in graph.nodes if node.op == "placeholder"]
    stage_node = [node for node in graph.nodes if node.op == "call_module"][stage]
    assert isinstance(module, fx.GraphModule)
    names = [node.name for node in module.graph.nodes if node.op == "placeholder"]
    return {
        names[position]: model_inputs.index(argument)
        for position, argument in enumerate(stage_node.args)
        if isinstance(argument, fx.Node) and argument.op == "placeholder"
    }


def _unmark(module: nn.Module, points: list[str]) -> None:
    """Gives the blocks back their own ``forward``: torch's ``pipeline()`` marks the split
    points by replacing it in place, and would wrap its own mark when the model is traced
    again for calls of other shapes."""
    for point in points:
        block = module.get_submodule(point)
        for marked in ("forward", "_orig_forward"):
            block.__dict__.pop(marked, None)


def _whole_batch(calls: list[ModelCall]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The microbatches' model arguments joined back into one batch, which the schedule
    splits again the same way (equal parts along the first axis)."""
    first = calls[0]
    args = tuple(_join([call.args[i] for call in calls]) for i in range(len(first.args)))
    kwargs = {key: _join([call.kwargs[key] for call in calls]) for key in first.kwargs}
    return args, kwargs


def _join(values: list[Any]) -> Any:
    if isinstance(values[0], torch.Tensor) and values[0].dim() > 0:
        return torch.cat(values)
    return values[0]


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, tuple | list):
        return type(value)(_detached(item) for item in value)
    if isinstance(value, dict):
        return {key: _detached(item) for key, item in value.items()}
    return value


def _from_last_stage(results: list[Any]) -> list[Any]:
    state = smp_state.current()
    last = state.topology.rank_of(state.topology.pp_size - 1, state.dp_rank)
    carried = [results if state.rank == last else None]
    cpu = [_to_cpu(carried[0])]
    dist.broadcast_object_list(cpu, src=last, group=state.pp_group)
    received: list[Any] = cpu[0]
    return received


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, tuple | list):
        return type(value)(_to_cpu(item) for item in value)
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    return value
