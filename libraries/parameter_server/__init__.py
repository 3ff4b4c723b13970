"""Runyard's parameter server for PyTorch (``distribution={"parameter_server": {...}}``).

One server process per instance keeps a shard of the model's parameters in that
instance's CPU memory and runs the optimizer for it. Workers (the user's script, one or
more per instance) push gradients to the servers owning each shard and pull fresh values
back. Transport: ``torch.distributed.rpc`` (TensorPipe).

Worker script::

    import functools, torch
    import libraries.parameter_server as ps

    ps.init()                                    # join servers and workers (env contract)
    model = make_model()
    trainer = ps.Trainer(
        model,
        functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9),
        mode="async",                            # or "sync"
        max_staleness=4,                         # async only; None = unbounded
    )
    for inputs, labels in my_shard_of_the_data(ps.worker_index(), ps.num_workers()):
        loss_fn(model(inputs), labels).backward()
        trainer.step()                           # push grads, wait if needed, pull params
    if ps.worker_index() == 0:
        trainer.pull()                           # the servers' latest values
        torch.save(model.state_dict(), f"{os.environ['SM_MODEL_DIR']}/model.pt")
    ps.shutdown()                                # returns once every worker is done

API: ``init(*, join_timeout_s=600.0)``, ``Trainer(model, optimizer_factory, *,
mode="async", max_staleness=None)`` with ``step()``, ``pull()``, ``steps_done`` and
``shard_of(name)``; ``worker_index()``, ``num_workers()``, ``num_servers()``,
``server_stats() -> list[ShardStats]``, ``shutdown()``; every failure raises
``ParameterServerError``.

Semantics:

- Initial values: worker 0's. Every other worker's model is overwritten with them when its
  Trainer is created, so all start alike whatever their seeds.
- ``optimizer_factory(tensors) -> torch.optim.Optimizer`` runs on each server over its own
  shard; it is pickled, so use ``functools.partial`` of an optimizer class or a module-level
  function. Worker 0's factory is used. Per-parameter optimizers (SGD, momentum, Adam, ...)
  behave exactly as unsharded; ones that look across parameters (LBFGS) do not.
- ``mode="async"``: each push is applied on arrival and answered with the shard's fresh
  values. With ``max_staleness=s`` a worker that has pushed ``c`` steps is answered only
  once the slowest still-running worker has pushed at least ``c - s``.
- ``mode="sync"``: a server applies a step once every still-running worker has pushed it,
  with the gradients averaged (a gradient a worker did not send counts as zero), and
  answers all of them with the same values. With equal batch sizes this is training on
  the concatenated batch. Workers that have called ``shutdown()`` are no longer waited for.
- Sharding (``sharding.plan_shards``): greedy size balancing, largest parameter first (ties
  by name) to the server holding the fewest elements (ties to the lower index).
- Buffers (e.g. BatchNorm statistics) are not parameters and stay local to each worker.

Env contract, set by the launcher for every process:

- ``RUNYARD_PS_ROLE``: ``server`` or ``worker``
- ``RUNYARD_PS_NUM_SERVERS``: S, the number of servers (= instances)
- ``RUNYARD_PS_RANK``: RPC rank; servers 0..S-1 in instance order, workers S..S+W-1 in
  instance order, then local rank. Worker index = rank - S.
- ``RUNYARD_PS_WORLD_SIZE``: S + W
- ``MASTER_ADDR``, ``MASTER_PORT``: the rendezvous (algo-1's address, a free port); server 0
  hosts it. TensorPipe then listens on ephemeral ports of its own.
- ``RUNYARD_HOST`` (e.g. ``algo-2``) and, for workers, ``LOCAL_RANK``: informational.

Processes per instance: one ``python -m libraries.parameter_server [--worker-timeout 120]
[--join-timeout 600]`` and the workers (the user's script). A server exits 0 once every
worker has called ``shutdown()``, and 1 if a worker is silent (no step, no heartbeat; workers
beat every second) for the worker timeout, or the group has not formed within the join
timeout. Its failure is the reply to every waiting worker call, so the surviving workers
raise ``ParameterServerError`` instead of waiting forever.

Shutdown: ``shutdown()`` stops the heartbeat, tells every server this worker is finished and
waits until all workers are (a sync step or staleness bound no longer waits for it), then
all processes leave the RPC group with torch's graceful shutdown. A script that exits
without ``shutdown()`` drops its connections at exit; the servers then fail after the worker
timeout.
"""

from __future__ import annotations

from libraries.parameter_server.errors import ParameterServerError
from libraries.parameter_server.protocol import Mode, ShardStats, TrainingConfig
from libraries.parameter_server.session import (
    init,
    num_servers,
    num_workers,
    server_stats,
    shutdown,
    worker_index,
)
from libraries.parameter_server.sharding import plan_shards
from libraries.parameter_server.trainer import Trainer

__all__ = [
    "Mode",
    "ParameterServerError",
    "ShardStats",
    "Trainer",
    "TrainingConfig",
    "init",
    "num_servers",
    "num_workers",
    "plan_shards",
    "server_stats",
    "shutdown",
    "worker_index",
]
