"""One server's shard: its parameters, its optimizer, and the rules for applying pushes.

Every RPC handler runs on one of the RPC agent's threads, so all state sits behind one
lock. Calls that may have to wait (a sync step, a push held back by the staleness bound,
registering before worker 0 has sent the initial values, finishing before the others)
return a future at once and complete it later, so a waiting worker never occupies a
thread. Futures are completed after the lock is released: completing one sends the reply.

Refusals travel as a ``Refused`` reply rather than as an exception on the future: torch
hands an exception set on an ``async_execution`` future back to the caller as a plain
value, so an explicit type is what the caller can rely on.

Clocks: a worker's clock is the number of pushes this server has received from it. In
async mode with ``max_staleness = s`` a worker whose clock is ``c`` is only answered once
``c - min(clocks of the workers still running) <= s``: it may be at most ``s`` steps
ahead of the slowest one when it starts its next step. Finished workers no longer count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from torch.futures import Future

from libraries.parameter_server.protocol import (
    OptimizerFactory,
    Refused,
    ShardStats,
    TrainingConfig,
)

Tensors = dict[str, Any]
# Replies to send once the lock is released: (future, result or Refused).
Outbox = list[tuple[Any, object]]


class ShardServer:
    def __init__(
        self,
        server_index: int,
        num_workers: int,
        worker_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server_index = server_index
        self._num_workers = num_workers
        self._worker_timeout_s = worker_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._finished = threading.Event()

        self._config: TrainingConfig | None = None
        self._parameters: Tensors = {}
        self._optimizer: Any = None
        # Workers that registered before worker 0 supplied the initial values.
        self._registrations: dict[int, tuple[TrainingConfig, dict[str, tuple[int, ...]], Any]] = {}

        self._clocks = [0] * num_workers
        self._running = set(range(num_workers))
        self._last_seen = [clock()] * num_workers
        self._sync_sum: Tensors = {}
        self._sync_waiting: dict[int, Any] = {}
        self._held: dict[int, Any] = {}
        self._finish_waiting: list[Any] = []

        self._failure: str | None = None
        self._updates_applied = 0
        self._max_lead = 0

    # --- RPC operations ----------------------------------------------------------------

    def register(
        self,
        worker: int,
        config: TrainingConfig,
        parameters: Tensors,
        optimizer_factory: OptimizerFactory,
    ) -> Any:
        """Answered with this shard's current values once worker 0 has supplied them."""
        future: Any = Future()
        outbox: Outbox = []
        with self._lock:
            self._seen(worker)
            if self._failure is None and worker == 0 and self._config is None:
                self._initialize(config, parameters, optimizer_factory, outbox)
            if self._failure is not None:
                outbox.append((future, Refused(self._failure)))
            else:
                self._registrations[worker] = (config, _shapes(parameters), future)
                if self._config is not None:
                    self._answer_registrations(outbox)
        _deliver(outbox)
        return future

    def push(self, worker: int, step: int, gradients: Tensors) -> Any:
        """Answered with the shard's fresh values when the worker may take its next step."""
        future: Any = Future()
        outbox: Outbox = []
        with self._lock:
            self._seen(worker)
            problem = self._check_push(worker, step, gradients)
            if problem is not None:
                outbox.append((future, Refused(problem)))
            else:
                self._clocks[worker] += 1
                if self._config is not None and self._config.mode == "sync":
                    self._add_to_sync_step(worker, gradients, future, outbox)
                else:
                    self._apply(gradients)
                    self._held[worker] = future
                    self._release_held(outbox)
        _deliver(outbox)
        return future

    def pull(self) -> Tensors | Refused:
        with self._lock:
            if self._failure is not None:
                return Refused(self._failure)
            return self._snapshot()

    def heartbeat(self, worker: int) -> None:
        with self._lock:
            self._seen(worker)

    def finish(self, worker: int) -> Any:
        """Answered once every worker has finished, so all can shut RPC down together."""
        future: Any = Future()
        outbox: Outbox = []
        with self._lock:
            if self._failure is not None:
                outbox.append((future, Refused(self._failure)))
            else:
                self._running.discard(worker)
                self._finish_waiting.append(future)
                self._after_worker_left(worker, outbox)
        _deliver(outbox)
        return future

    def stats(self) -> ShardStats:
        with self._lock:
            return ShardStats(
                server_index=self.server_index,
                config=self._config,
                parameter_names=tuple(self._parameters),
                numel=sum(int(tensor.numel()) for tensor in self._parameters.values()),
                clocks=tuple(self._clocks),
                waiting=tuple(sorted([*self._sync_waiting, *self._held])),
                finished=tuple(sorted(set(range(self._num_workers)) - self._running)),
                updates_applied=self._updates_applied,
                max_lead=self._max_lead,
            )

    # --- lifecycle ---------------------------------------------------------------------

    def start_worker_timeout(self) -> None:
        """Count silence from now: until the group has formed no worker can call, and
        forming it may take far longer than the worker timeout."""
        with self._lock:
            self._last_seen = [self._clock()] * self._num_workers

    def check_liveness(self) -> None:
        """Fail the shard if a running worker has been silent longer than the timeout."""
        now = self._clock()
        with self._lock:
            silent = [
                worker
                for worker in sorted(self._running)
                if now - self._last_seen[worker] > self._worker_timeout_s
            ]
        if silent:
            self.fail(
                f"worker {silent[0]} sent nothing for {self._worker_timeout_s:g} s "
                "(no step, no heartbeat); it is presumed dead"
            )

    def fail(self, reason: str) -> None:
        """Give up: every waiting and every later call gets ``reason`` as its error."""
        outbox: Outbox = []
        with self._lock:
            self._fail(reason, outbox)
        _deliver(outbox)

    def wait_until_finished(self, poll_s: float) -> str | None:
        """Block until every worker finished (None) or the shard failed (the reason)."""
        while not self._finished.wait(poll_s):
            self.check_liveness()
        return self._failure

    # --- helpers, all called with the lock held ----------------------------------------

    def _seen(self, worker: int) -> None:
        self._last_seen[worker] = self._clock()

    def _initialize(
        self,
        config: TrainingConfig,
        parameters: Tensors,
        optimizer_factory: OptimizerFactory,
        outbox: Outbox,
    ) -> None:
        self._parameters = {name: parameters[name].detach().clone() for name in sorted(parameters)}
        if self._parameters:
            # torch optimizers refuse an empty parameter list; an empty shard needs none.
            try:
                self._optimizer = optimizer_factory(list(self._parameters.values()))
            except Exception as error:  # a user's factory can fail in any way
                self._fail(
                    f"the optimizer factory failed on server {self.server_index}: {error!r}", outbox
                )
                return
        self._config = config

    def _answer_registrations(self, outbox: Outbox) -> None:
        assert self._config is not None
        expected = _shapes(self._parameters)
        for worker in sorted(self._registrations):
            config, shapes, future = self._registrations.pop(worker)
            problem = None
            if config != self._config:
                problem = (
                    f"worker {worker} asked for {config} but worker 0 for {self._config}; "
                    "every worker must create its Trainer with the same mode and staleness"
                )
            elif shapes != expected:
                problem = (
                    f"worker {worker}'s model does not match worker 0's on server "
                    f"{self.server_index}: {sorted(shapes.items())} != "
                    f"{sorted(expected.items())}"
                )
            if problem is not None:
                # A job whose workers disagree cannot train; stop everyone, not just this one.
                outbox.append((future, Refused(problem)))
                self._fail(problem, outbox)
                return
            outbox.append((future, self._snapshot()))

    def _check_push(self, worker: int, step: int, gradients: Tensors) -> str | None:
        if self._failure is not None:
            return self._failure
        if self._config is None:
            return f"worker {worker} pushed before worker 0 registered the model"
        if worker not in self._running:
            return f"worker {worker} pushed after it finished"
        if step != self._clocks[worker]:
            return f"worker {worker} pushed step {step} but server is at {self._clocks[worker]}"
        for name, gradient in gradients.items():
            parameter = self._parameters.get(name)
            if parameter is None:
                return f"server {self.server_index} does not hold parameter {name!r}"
            if tuple(gradient.shape) != tuple(parameter.shape):
                return f"gradient for {name!r} has shape {tuple(gradient.shape)}"
        return None

    def _add_to_sync_step(
        self, worker: int, gradients: Tensors, future: Any, outbox: Outbox
    ) -> None:
        for name, gradient in gradients.items():
            if name in self._sync_sum:
                self._sync_sum[name].add_(gradient)
            else:
                self._sync_sum[name] = gradient.detach().clone()
        self._sync_waiting[worker] = future
        self._close_sync_step_if_complete(outbox)

    def _close_sync_step_if_complete(self, outbox: Outbox) -> None:
        # A step closes when every running worker has pushed; finished ones are not
        # waited for, and a gradient nobody sent counts as zero in the average.
        if not self._sync_waiting or not self._running.issubset(self._sync_waiting):
            return
        contributors = len(self._sync_waiting)
        self._apply({name: total / contributors for name, total in self._sync_sum.items()})
        self._sync_sum = {}
        fresh = self._snapshot()
        for future in self._sync_waiting.values():
            outbox.append((future, fresh))
        self._sync_waiting = {}

    def _release_held(self, outbox: Outbox) -> None:
        assert self._config is not None
        bound = self._config.max_staleness
        slowest = min((self._clocks[worker] for worker in self._running), default=0)
        fresh: Tensors | None = None
        for worker in sorted(self._held):
            lead = self._clocks[worker] - slowest
            if bound is not None and lead > bound:
                continue
            fresh = self._snapshot() if fresh is None else fresh
            self._max_lead = max(self._max_lead, lead)
            outbox.append((self._held.pop(worker), fresh))

    def _after_worker_left(self, worker: int, outbox: Outbox) -> None:
        if self._config is None and worker == 0 and self._registrations:
            self._fail("worker 0 finished without creating its Trainer", outbox)
            return
        if self._config is not None:
            # The slowest running worker may have just left, or the step's last pusher.
            if self._config.mode == "sync":
                self._close_sync_step_if_complete(outbox)
            else:
                self._release_held(outbox)
        if not self._running:
            for future in self._finish_waiting:
                outbox.append((future, None))
            self._finish_waiting = []
            self._finished.set()

    def _apply(self, gradients: Mapping[str, Any]) -> None:
        if self._optimizer is None:
            return
        for name, parameter in self._parameters.items():
            parameter.grad = gradients.get(name)
        self._optimizer.step()
        for parameter in self._parameters.values():
            parameter.grad = None
        self._updates_applied += 1

    def _snapshot(self) -> Tensors:
        # A copy: the reply is serialized after the lock is released, while later pushes
        # keep updating the parameters in place.
        return {name: tensor.detach().clone() for name, tensor in self._parameters.items()}

    def _fail(self, reason: str, outbox: Outbox) -> None:
        if self._failure is None:
            self._failure = reason
        refusal = Refused(self._failure)
        waiting = [
            *(future for _, _, future in self._registrations.values()),
            *self._sync_waiting.values(),
            *self._held.values(),
            *self._finish_waiting,
        ]
        outbox.extend((future, refusal) for future in waiting)
        self._registrations.clear()
        self._sync_waiting = {}
        self._held = {}
        self._finish_waiting = []
        self._finished.set()


def _shapes(tensors: Tensors) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in tensors.items()}


def _deliver(outbox: Outbox) -> None:
    for future, value in outbox:
        future.set_result(value)
