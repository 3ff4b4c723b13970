"""``smp.DistributedOptimizer``: the script's optimizer, with fp16's loss scaling and the
model's state layout for saving and loading.

Under fp16, ``model.backward`` multiplies each loss by the loss scale; ``step`` divides
the gradients back, and skips the update where any rank's gradients overflowed, halving a
dynamic scale then and doubling it after ``scale_window`` clean steps (the arguments
SageMaker's optimizer takes: ``static_loss_scale``, ``dynamic_loss_scale``,
``dynamic_loss_args``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from libraries.modelparallel import state as smp_state
from libraries.modelparallel.model import distributed_model


class LossScale:
    def __init__(self, static: float | None, dynamic: bool, args: Mapping[str, Any] | None) -> None:
        args = dict(args or {})
        self.dynamic = dynamic
        self.value = float(args.get("init_scale", 2.0**16) if dynamic else (static or 1.0))
        self.window = int(args.get("scale_window", 1000))
        self.minimum = float(args.get("min_scale", 1.0))
        # Overflows tolerated before the scale is lowered (SageMaker's ``delayed_shift``).
        self.delay = int(args.get("delayed_shift", 1))
        self._clean = 0
        self._overflows = 0

    def update(self, overflowed: bool) -> None:
        if not self.dynamic:
            return
        if overflowed:
            self._clean = 0
            self._overflows += 1
            if self._overflows >= self.delay:
                self.value = max(self.value / 2, self.minimum)
                self._overflows = 0
            return
        self._clean += 1
        if self._clean % self.window == 0:
            self.value *= 2


class DistributedOptimizer:
    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        static_loss_scale: float | None = 1.0,
        dynamic_loss_scale: bool = False,
        dynamic_loss_args: Mapping[str, Any] | None = None,
        **_sagemaker_options: Any,
    ) -> None:
        state = smp_state.current()
        self.optimizer = optimizer
        self._scale = LossScale(static_loss_scale, dynamic_loss_scale, dynamic_loss_args)
        # Loss scaling only guards fp16's narrow range; bf16 and fp32 need none.
        self._scaled = state.parameters.fp16
        # Whether the last step found overflowing gradients and skipped its update
        # (SageMaker's fp16 optimizer's ``overflow``; always False without fp16).
        self.overflow = False
        state.optimizer = self
        model = distributed_model(state)
        if model is not None and model.pipeline is not None:
            self.keep_only(model.pipeline.module, model.stand_ins)

    def keep_only(
        self, stage: torch.nn.Module, stand_ins: Mapping[int, torch.nn.Parameter]
    ) -> None:
        """Pipeline stages: this rank steps its stage's parameters only, so the others
        leave the optimizer (with any state they had) and hold no memory in it. A tied
        parameter the stage holds a copy of (``stand_ins``, by the model's parameter's
        id) is stepped as that copy."""
        own = {id(parameter) for parameter in stage.parameters()}
        for group in self.optimizer.param_groups:
            kept = []
            for parameter in group["params"]:
                stand_in = stand_ins.get(id(parameter))
                if stand_in is not None:
                    moved = self.optimizer.state.pop(parameter, None)
                    if moved is not None:
                        self.optimizer.state[stand_in] = moved
                    kept.append(stand_in)
                elif id(parameter) in own:
                    kept.append(parameter)
                else:
                    self.optimizer.state.pop(parameter, None)
            group["params"] = kept

    @property
    def loss_scale(self) -> float:
        return self._scale.value if self._scaled else 1.0

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def clip_master_grads(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Clips the gradients as the update will see them (loss scale taken out) to a
        total norm of ``max_norm`` over the whole model, every rank's part counted once;
        returns the norm before clipping (inf or nan where they overflowed, untouched)."""
        grads = self._grads()
        total = self._total_norm(float(norm_type)) / self.loss_scale
        if torch.isfinite(total):
            factor = max_norm / (float(total) + 1e-6)
            if factor < 1:
                for grad in grads:
                    grad.mul_(factor)
        return total

    def step(self, closure: Any = None) -> Any:
        if not self._scaled:
            return self.optimizer.step(closure)
        # The scale this step's backward used, before the update may change it.
        scale = self.loss_scale
        grads = self._grads()
        overflowed = _any_rank(not all(bool(torch.isfinite(_local(g)).all()) for g in grads))
        self._scale.update(overflowed)
        self.overflow = overflowed
        if overflowed:
            smp_state.current().say_once("fp16: a step with overflowing gradients was skipped")
            return None
        for grad in grads:
            grad.div_(scale)
        return self.optimizer.step(closure)

    def _total_norm(self, norm_type: float) -> torch.Tensor:
        """The norm of the whole model's gradient, each part counted once: a DTensor
        gradient (split or sharded) whole through its own collectives; a stage's plain
        gradients summed over the pipeline's stages; plain shares of a split parameter
        (tensor parallelism inside stages) over the tensor-parallel group too. Replicas
        hold the same gradients and are not summed; a parameter tied across stages counts
        on the first stage that holds it."""
        state = smp_state.current()
        model = distributed_model(state)
        shares: set[int] = set()
        elsewhere: set[int] = set()
        if model is not None and model.shares is not None:
            splits = model.shares.splits
            shares = {id(p) for n, p in model.own_module.named_parameters() if n in splits}
        if model is not None and model.ties is not None:
            elsewhere = model.ties.copies_counted_elsewhere()
        device = state.device
        whole, stage, shared = (torch.zeros((), dtype=torch.float64, device=device) for _ in "123")
        for group in self.param_groups:
            for parameter in group["params"]:
                grad = parameter.grad
                if grad is None or id(parameter) in elsewhere:
                    continue
                if isinstance(grad, DTensor):
                    norm = torch.linalg.vector_norm(grad, norm_type).full_tensor()
                    whole = _combined(whole, norm.double(), norm_type)
                else:
                    norm = torch.linalg.vector_norm(grad, norm_type).double()
                    if id(parameter) in shares:
                        shared = _combined(shared, norm, norm_type)
                    else:
                        stage = _combined(stage, norm, norm_type)
        if state.tp_group is not None and shares:
            _reduce(shared, norm_type, state.tp_group)
        stage = _merged(stage, shared, norm_type)
        if state.topology.pp_size > 1:
            _reduce(stage, norm_type, state.pp_group)
        total = _merged(whole, stage, norm_type)
        return total if norm_type == math.inf else total ** (1.0 / norm_type)

    def _grads(self) -> list[torch.Tensor]:
        return [
            p.grad for group in self.param_groups for p in group["params"] if p.grad is not None
        ]

    def state_dict(self) -> dict[str, Any]:
        """The optimizer state, keyed by parameter name: gathered where the states are
        sharded; tensor-parallel parameters' state as this rank holds it."""
        model = self._model()
        if model is None:
            return self.optimizer.state_dict()
        options = StateDictOptions(full_state_dict=isinstance(model, FSDPModule))
        return get_optimizer_state_dict(model, self.optimizer, options=options)

    def local_state_dict(self) -> dict[str, Any]:
        model = self._model()
        if model is None:
            return self.optimizer.state_dict()
        return get_optimizer_state_dict(model, self.optimizer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        model = self._model()
        if model is None:
            self.optimizer.load_state_dict(state_dict)
            return
        full = isinstance(model, FSDPModule) and not _holds_dtensors(state_dict)
        options = StateDictOptions(full_state_dict=full)
        set_optimizer_state_dict(model, self.optimizer, state_dict, options=options)

    def _model(self) -> torch.nn.Module | None:
        """The module whose parameter names key the state (this rank's stage under a
        pipeline); None: the optimizer's own layout, with no model."""
        model = distributed_model(smp_state.current())
        return None if model is None else model.own_module


def distributed_optimizer(state: smp_state.State) -> DistributedOptimizer | None:
    """The optimizer the script wrapped, as its class (the state holds it as ``wrapped``'s
    protocol, for the modules below this one)."""
    optimizer = state.optimizer
    if optimizer is None or isinstance(optimizer, DistributedOptimizer):
        return optimizer
    raise TypeError(
        f"the state's optimizer is a {type(optimizer).__name__}, not an smp.DistributedOptimizer"
    )


def _combined(total: torch.Tensor, norm: torch.Tensor, norm_type: float) -> torch.Tensor:
    """``total`` (a sum of p-th powers, or the largest value for the inf-norm) with a
    p-norm ``norm`` counted in."""
    if norm_type == math.inf:
        return torch.maximum(total, norm)
    return total + norm**norm_type


def _merged(total: torch.Tensor, other: torch.Tensor, norm_type: float) -> torch.Tensor:
    """Two totals as ``_combined`` keeps them, as one."""
    return torch.maximum(total, other) if norm_type == math.inf else total + other


def _reduce(total: torch.Tensor, norm_type: float, group: dist.ProcessGroup) -> None:
    op = dist.ReduceOp.MAX if norm_type == math.inf else dist.ReduceOp.SUM
    dist.all_reduce(total, op=op, group=group)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _any_rank(flag: bool) -> bool:
    value = torch.tensor([1.0 if flag else 0.0], device=smp_state.current().device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def _holds_dtensors(value: Any) -> bool:
    if isinstance(value, DTensor):
        return True
    if isinstance(value, Mapping):
        return any(_holds_dtensors(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_dtensors(item) for item in value)
    return False
