"""``smp.DistributedModel``: the script's model, kept in step across the job's processes.

Without pipeline stages (``partitions`` 1) each replica holds the whole model: plainly
replicated under torch's DistributedDataParallel, or, with
``sharded_data_parallel_degree`` d > 1, sharded across groups of d ranks with FSDP2's
``fully_shard`` on a 2-D mesh (replicate x shard): inside a group, parameters are
all-gathered for compute and gradients reduce-scattered; across groups, the shards'
gradients are all-reduced (MiCS's two hops).

A step over M microbatches yields the gradient of the mean loss over the global batch:
``backward`` scales each microbatch's loss by 1/M, and the replicas' gradients are
averaged once, after the last microbatch (every earlier one skips the synchronisation).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._composable.checkpoint_activation import (
    checkpoint as checkpoint_activations,
)
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.utils.hooks import RemovableHandle

from libraries.modelparallel import (
    batches,
    delayed,
    distributed_names,
    projections,
    stage_split,
    tensor,
)
from libraries.modelparallel import state as smp_state
from libraries.modelparallel.activations import offloaded
from libraries.modelparallel.calls import ModelCall
from libraries.modelparallel.pipeline import (
    Pipeline,
    Probed,
    Released,
    agreed_split_points,
    held_again,
    release_others,
    shapes,
)
from libraries.modelparallel.precision import autocast, low_precision
from libraries.modelparallel.ties import TiedParameters


class DistributedModel(nn.Module):
    def __init__(
        self,
        module: nn.Module,
        trace_device: str = "cpu",
        backward_passes_per_step: int = 1,
        average_grads_across_microbatches: bool = True,
        **_sagemaker_options: Any,
    ) -> None:
        super().__init__()
        state = smp_state.current()
        if state.model is not None:
            raise RuntimeError("smp.DistributedModel may wrap one model per process")
        self.backward_passes_per_step = max(int(backward_passes_per_step), 1)
        self.average_grads_across_microbatches = average_grads_across_microbatches
        self._passes = 0
        self._microbatch_scale = 1.0
        self._inner = module
        # Pipeline stages: built at the first step (libraries.modelparallel.pipeline).
        self.pipeline: Pipeline | None = None
        self._pipelines: dict[tuple[Any, ...], Pipeline] = {}
        # Other stages' parameters, whose storage this rank gave back once split.
        self._released: Released = []
        # Parameters used on several stages (tied embeddings): set with the pipeline.
        self.ties: TiedParameters | None = None
        self.stand_ins: dict[int, nn.Parameter] = {}
        self._probing = False
        self._replaying: _Replay | None = None
        self._in_step = False
        # Parameters made on the meta device get storage where this rank holds them: its
        # shards once sharded, its stage once split (``build_pipeline``), else the whole.
        self._delayed = delayed.is_delayed(module)
        whole = state.mesh is None and state.topology.pp_size == 1
        if not self._delayed:
            module.to(state.device)
        else:
            delayed.move_buffers(module, state.device)
            if whole:
                _made_whole(module, state.device)
        # Blocks split across the tensor-parallel group, by name ("" for the model
        # itself), with their family.
        self.split_blocks: list[tuple[str, str]] = []
        # Inside pipeline stages, the split parameters are plain shares (``stage_split``).
        self.shares: stage_split.Shares | None = None
        # Split blocks compute on the rows of every rank of their group, unless the
        # group's ranks are fed one batch (``batches``).
        join = not state.parameters.prescaled_batch
        if state.tp_mesh is not None and state.topology.pp_size > 1:
            assert state.tp_group is not None
            self.split_blocks, self.shares = stage_split.distribute(
                module, state.tensor_parallel, state.tp_group, state.tp_mesh, join=join
            )
            _say_split(state, self.split_blocks)
        elif state.tp_mesh is not None:
            self.split_blocks = tensor.distribute(
                module, state.tensor_parallel, state.tp_mesh, join=join
            )
            _say_split(state, self.split_blocks)
        # Split parameters of several parts, held by rank (``projections``), by name.
        self.parted = projections.parted(module)
        for checkpointed in state.checkpointed:
            checkpoint_activations(checkpointed)
        distributed_names.give(module, state.tensor_parallel)
        # Called once the model is partitioned, before the first step runs it.
        # (An OrderedDict, which torch's RemovableHandle holds a weak reference to.)
        self._post_partition_hooks: OrderedDict[int, Callable[[Any, Any], None]] = OrderedDict()
        self._partitioned = False
        self.wrapped: nn.Module = _distribute(module, state)
        if self._delayed and state.mesh is not None:
            _made_whole(module, state.device)  # each shard (DTensor) is made on its own
        state.model = self

    # -- what scripts call ------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._probing:
            raise Probed(ModelCall(args, kwargs))
        if self._replaying is not None:
            return self._replaying.output
        state = smp_state.current()
        if state.topology.pp_size > 1:
            raise RuntimeError("a model in pipeline stages runs inside an smp.step function")
        if state.topology.tp_size > 1 and not self._in_step:
            # Split blocks exchange rows with the group's other ranks in every call:
            # as in SageMaker's library, the ranks call the model together, in a step.
            raise RuntimeError("a tensor-parallel model runs inside an smp.step function")
        with autocast(state), offloaded(state):
            return self.wrapped(*args, **kwargs)

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of one microbatch's loss, scaled so a step's gradients are those of the
        mean loss over its microbatches (and by the loss scale, under fp16). In pipeline
        stages, the schedule runs the backward: the loss is handed to it."""
        state = smp_state.current()
        loss_scale = state.optimizer.loss_scale if state.optimizer is not None else 1.0
        if self._replaying is not None:
            # The schedule averages over the microbatches itself.
            self._replaying.loss = loss * loss_scale if loss_scale != 1.0 else loss
            return
        scale = self._microbatch_scale * loss_scale
        torch.autograd.backward(loss * scale if scale != 1.0 else loss)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        """The whole model's parameters and buffers, gathered, on every rank."""
        if self.pipeline is not None:
            own = self.local_state_dict()
            if self.shares is not None:
                own = {key: self._whole(key, value) for key, value in own.items()}
            whole = _gathered_stages(own)
            # A tied parameter under every name, one no stage's modules use too.
            return self.ties.under_every_name(whole) if self.ties is not None else whole
        if self.shares is not None:
            return {key: self._whole(key, value) for key, value in self._inner.state_dict().items()}
        if isinstance(self._inner, FSDPModule) or self.split_blocks:
            options = StateDictOptions(full_state_dict=True)
            return get_model_state_dict(self._inner, options=options)
        return self._inner.state_dict(*args, **kwargs)

    def local_state_dict(self) -> dict[str, Any]:
        """This rank's part: its stage's (under the model's own names, as its
        ``state_dict`` has them), or its shards (DTensors) where the states are sharded or
        split; inside pipeline stages, a split parameter is this rank's share, a plain
        tensor (GPT-2's fused query-key-value held by rank)."""
        if self.pipeline is not None:
            saved = self._inner.state_dict().keys()
            return {
                key: value
                for key, value in self.pipeline.module.state_dict().items()
                if key in saved
            }
        return self._inner.state_dict()

    def load_state_dict(  # type: ignore[override]
        self, state_dict: dict[str, Any], strict: bool = True
    ) -> Any:
        """Loads a whole state_dict (``state_dict()``'s) or this rank's own part
        (``local_state_dict()``'s)."""
        if self.pipeline is not None:
            own = self.local_state_dict().keys()
            missing = sorted(own - state_dict.keys())
            if strict and missing:
                raise RuntimeError(f"load_state_dict: missing keys of this stage: {missing}")
            # strict=False: a stage's traced module keeps the model's non-persistent
            # buffers (rotary frequencies, say) as its own, which no state_dict holds.
            return self.pipeline.module.load_state_dict(
                {key: self._own(key, value) for key, value in state_dict.items() if key in own},
                strict=False,
            )
        if self.shares is not None:
            given = {key: self._own(key, value) for key, value in state_dict.items()}
            return self._inner.load_state_dict(given, strict=strict)
        if (isinstance(self._inner, FSDPModule) or self.split_blocks) and not _is_local(state_dict):
            options = StateDictOptions(full_state_dict=True, strict=strict)
            return set_model_state_dict(self._inner, state_dict, options=options)
        return self._inner.load_state_dict(state_dict, strict=strict)

    def _whole(self, key: str, value: Any) -> Any:
        """A split parameter whole (in a pipelined tensor-parallel model), else ``value``."""
        if self.shares is None or key not in self.shares.splits:
            return value
        return self.shares.whole(key, value)

    def _own(self, key: str, value: Any) -> Any:
        """This rank's share of a split parameter, else ``value``."""
        if self.shares is None or key not in self.shares.splits:
            return value
        return self.shares.own(key, value)

    @property
    def module(self) -> nn.Module:
        """The script's own module (sharded in place where the states are sharded)."""
        return self._inner

    def get_module(self) -> nn.Module:
        """The script's own module, as SageMaker's ``get_module()`` returns it."""
        return self._inner

    @property
    def partitioned(self) -> bool:
        """Whether the first step has partitioned the model (SageMaker's property)."""
        return self._partitioned

    def register_post_partition_hook(self, hook: Callable[[Any, Any], None]) -> RemovableHandle:
        """``hook(model, optimizer)`` runs once, when the first ``smp.step`` has partitioned
        the model and before it runs a microbatch."""
        handle = RemovableHandle(self._post_partition_hooks)
        self._post_partition_hooks[handle.id] = hook
        return handle

    def partitioned_now(self) -> None:
        """Called by each step once the model is in its stages: the first time, the post
        partition hooks run."""
        if self._partitioned:
            return
        self._partitioned = True
        optimizer = smp_state.current().optimizer
        for hook in list(self._post_partition_hooks.values()):
            hook(self, optimizer)

    # -- what ``smp.step`` calls ------------------------------------------------------

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """The model's call raises Probed with its arguments."""
        self._probing = True
        try:
            yield
        finally:
            self._probing = False

    @contextlib.contextmanager
    def replaying(self, output: Any) -> Iterator[_Replay]:
        """The model's call returns ``output`` (the last stage's); ``backward`` keeps its loss."""
        self._replaying = _Replay(output)
        try:
            yield self._replaying
        finally:
            self._replaying = None

    def build_pipeline(self, example: ModelCall) -> Pipeline:
        """The stages for calls shaped as ``example``: built at the first step, and again
        for each new shape of call, split at the same blocks and sharing their
        parameters."""
        state = smp_state.current()
        key = shapes(example)
        if self.pipeline is None:
            points = agreed_split_points(self._inner, state, example)
            if self._delayed:
                # Tracing needs every parameter's shape on the device, not its values:
                # the others' storage is given back below, before it is ever written.
                delayed.allocate(self._inner, state.device)
            self.pipeline = Pipeline(self._inner, state, example, points)
            self._pipelines[key] = self.pipeline
            self.ties = TiedParameters(self.pipeline.ties, state.topology, state.rank)
            self.stand_ins = self.ties.bind(self.pipeline.module, self._inner)
            if self._delayed:
                own = {id(parameter) for parameter in self.pipeline.module.parameters()}
                own |= self.stand_ins.keys()  # a tie's copy takes its model parameter's value
                delayed.initialise(self._inner, holds=lambda parameter: id(parameter) in own)
                self.ties.copy_from(self._inner)
            self.ties.agree()
            if state.optimizer is not None:
                state.optimizer.keep_only(self.pipeline.module, self.stand_ins)
            self._released = release_others(self._inner, self.pipeline.module)
        if key not in self._pipelines:
            with held_again(self._released):
                again = Pipeline(self._inner, state, example, self.pipeline.points)
            assert self.ties is not None
            self.ties.bind(again.module, self._inner)
            self._pipelines[key] = again
        return self._pipelines[key]

    @property
    def own_module(self) -> nn.Module:
        """The module whose parameters this rank updates: its stage once the pipeline is
        built, else the whole (possibly sharded) model."""
        return self.pipeline.module if self.pipeline is not None else self._inner

    @contextlib.contextmanager
    def stepping(self) -> Iterator[None]:
        """Inside an ``smp.step`` function: where a pipelined or tensor-parallel model
        may be called."""
        self._in_step = True
        try:
            yield
        finally:
            self._in_step = False

    def average_gradients(self, module: nn.Module, *, reduced: bool = False) -> None:
        """The ranks agree on the gradients of ``module`` (the model, or this rank's
        stage): those of the mean loss over the global batch (``batches``)."""
        blocks = [name for name, _ in self.split_blocks]
        batches.average_gradients(module.named_parameters(), blocks, reduced=reduced)

    @contextlib.contextmanager
    def microbatch(self, index: int, count: int) -> Iterator[None]:
        """Runs microbatch ``index`` of ``count``: gradients synchronise after the last
        one of every ``backward_passes_per_step``-th step only."""
        last = index == count - 1
        if last and torch.is_grad_enabled():  # an evaluation step is no backward pass
            self._passes += 1
        sync = last and self._passes % self.backward_passes_per_step == 0
        self._microbatch_scale = 1.0 / count if self.average_grads_across_microbatches else 1.0
        state = smp_state.current()
        try:
            if isinstance(self._inner, FSDPModule):
                self._inner.set_requires_gradient_sync(sync)
                yield
                if state.topology.tp_size > 1 and sync and torch.is_grad_enabled():
                    # FSDP averaged over the shard groups; the tensor-parallel ranks'
                    # gradients are of different rows still.
                    self.average_gradients(self._inner, reduced=True)
            elif state.topology.tp_size > 1 and sync and torch.is_grad_enabled():
                yield
                # No DDP: it does not take DTensor parameters.
                self.average_gradients(self._inner)
            elif isinstance(self.wrapped, DistributedDataParallel) and not sync:
                with self.wrapped.no_sync():
                    yield
            else:
                yield
        finally:
            self._microbatch_scale = 1.0


def distributed_model(state: smp_state.State) -> DistributedModel | None:
    """The model the script wrapped, as its class (the state holds it as ``wrapped``'s
    protocol, for the modules below this one)."""
    model = state.model
    if model is None or isinstance(model, DistributedModel):
        return model
    raise TypeError(f"the state's model is a {type(model).__name__}, not an smp.DistributedModel")


@dataclass
class _Replay:
    output: Any
    loss: torch.Tensor | None = None


def _gathered_stages(own: dict[str, Any]) -> dict[str, Any]:
    state = smp_state.current()
    stages: list[Any] = [None] * state.topology.pp_size
    local = {key: value.detach().cpu() for key, value in own.items()}
    dist.all_gather_object(stages, local, group=state.pp_group)
    return {key: value for stage in stages for key, value in stage.items()}


def _made_whole(module: nn.Module, device: torch.device) -> None:
    """Every parameter this rank holds of ``module`` (whole, or its shards) made."""
    delayed.allocate(module, device)
    delayed.initialise(module, holds=lambda _: True)


def _distribute(module: nn.Module, state: smp_state.State) -> nn.Module:
    if state.mesh is not None:
        policy = MixedPrecisionPolicy(param_dtype=low_precision(state), reduce_dtype=torch.float32)
        # Each block of a stack (a ModuleList's items) is gathered on its own, so only one
        # block's parameters are whole at a time; the root takes what is left.
        for stack in [m for m in module.modules() if isinstance(m, nn.ModuleList)]:
            for block in stack:
                fully_shard(block, mesh=state.mesh, mp_policy=policy)
        fully_shard(module, mesh=state.mesh, mp_policy=policy)
        return module
    if state.topology.pp_size > 1:
        return module  # split into stages at the first step; replicas average per stage
    if state.topology.tp_size > 1:
        return module  # replicas average after each step (``microbatch``)
    if state.topology.dp_size > 1:
        device_ids = [state.device.index] if state.device.type == "cuda" else None
        return DistributedDataParallel(module, device_ids=device_ids, process_group=state.dp_group)
    return module


def _say_split(state: smp_state.State, split: list[tuple[str, str]]) -> None:
    if not split:
        state.say_once(
            "tensor_parallel_degree > 1, but no module is marked for tensor parallelism "
            "(smp.tensor_parallelism(), smp.set_tensor_parallelism): every rank holds the "
            "whole model"
        )
        return
    families = sorted({family for _, family in split})
    first, last = (split[0][0] or "the model"), (split[-1][0] or "the model")
    state.say_once(
        f"tensor parallelism over {state.topology.tp_size} ranks: {len(split)} blocks "
        f"split ({', '.join(families)}), from {first} to {last}"
    )


def _is_local(state_dict: dict[str, Any]) -> bool:
    return any(isinstance(value, DTensor) for value in state_dict.values())
