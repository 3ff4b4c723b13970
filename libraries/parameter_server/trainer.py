"""The worker-side wrapper around a model whose parameters live on the servers."""

from __future__ import annotations

import pickle
from typing import Any

import torch

from libraries.parameter_server import server, session
from libraries.parameter_server.errors import ParameterServerError
from libraries.parameter_server.protocol import MODES, Mode, OptimizerFactory, TrainingConfig
from libraries.parameter_server.shard import Tensors
from libraries.parameter_server.sharding import names_by_server, plan_shards


class Trainer:
    """Trains ``model`` with its parameters sharded over the parameter servers.

    On creation worker 0's initial parameter values go to the servers and every worker's
    model is overwritten with them. Then, per step: ``loss.backward()``, ``step()``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer_factory: OptimizerFactory,
        *,
        mode: Mode = "async",
        max_staleness: int | None = None,
    ) -> None:
        _check_options(optimizer_factory, mode, max_staleness)
        self._contract = session.claim_trainer()
        self._parameters: dict[str, Any] = dict(model.named_parameters())
        self._owners = plan_shards(
            {name: int(p.numel()) for name, p in self._parameters.items()},
            self._contract.num_servers,
        )
        self._shards = names_by_server(self._owners, self._contract.num_servers)
        self._steps_done = 0
        config = TrainingConfig(mode=mode, max_staleness=max_staleness)
        index = self._contract.index
        fresh = session.call_servers(
            self._contract,
            server.remote_register,
            lambda s: (index, config, self._values(s), optimizer_factory),
            timeout_s=session.NO_TIMEOUT,
        )
        self._load(fresh)

    @property
    def steps_done(self) -> int:
        return self._steps_done

    def shard_of(self, name: str) -> int:
        """The index of the server that owns parameter ``name``."""
        return self._owners[name]

    def step(self) -> None:
        """Push this worker's gradients, wait until the mode lets it go on, and load the
        fresh parameters into the model. Gradients are cleared afterwards (set to None)."""
        index, step = self._contract.index, self._steps_done
        fresh = session.call_servers(
            self._contract,
            server.remote_push,
            lambda s: (index, step, self._gradients(s)),
            timeout_s=session.NO_TIMEOUT,
        )
        self._load(fresh)
        self._steps_done += 1
        for parameter in self._parameters.values():
            parameter.grad = None

    def pull(self) -> None:
        """Load the servers' current parameters into the model (e.g. before saving it)."""
        fresh = session.call_servers(
            self._contract,
            server.remote_pull,
            lambda _: (),
            timeout_s=session.PROMPT_CALL_TIMEOUT_S,
        )
        self._load(fresh)

    # Servers keep CPU tensors, and TensorPipe would need device maps for any other kind:
    # what goes out is a CPU tensor (``.cpu()`` costs nothing for one already there).
    def _values(self, server_index: int) -> Tensors:
        return {name: self._parameters[name].detach().cpu() for name in self._shards[server_index]}

    def _gradients(self, server_index: int) -> Tensors:
        gradients: Tensors = {}
        for name in self._shards[server_index]:
            gradient = self._parameters[name].grad
            # A parameter this batch did not reach: no gradient, as torch optimizers expect.
            if gradient is not None:
                gradients[name] = gradient.detach().cpu()
        return gradients

    def _load(self, shards: list[Tensors]) -> None:
        with torch.no_grad():
            for shard in shards:
                for name, value in shard.items():
                    self._parameters[name].copy_(value)


def _check_options(
    optimizer_factory: OptimizerFactory, mode: str, max_staleness: int | None
) -> None:
    if mode not in MODES:
        raise ParameterServerError(f"mode must be one of {MODES}, not {mode!r}")
    if max_staleness is not None:
        if mode == "sync":
            raise ParameterServerError("max_staleness applies to mode='async' only")
        if isinstance(max_staleness, bool) or max_staleness < 0:
            raise ParameterServerError(f"max_staleness must be >= 0, not {max_staleness!r}")
    try:
        pickle.dumps(optimizer_factory)
    except Exception as error:  # pickle raises many types for what it cannot handle
        raise ParameterServerError(
            "optimizer_factory travels to the servers and must be picklable, e.g. "
            f"functools.partial(torch.optim.SGD, lr=0.1): {error!r}"
        ) from error
