"""The rules one server applies, driven in-process (no RPC) with a clock the test moves."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from libraries.parameter_server.protocol import Refused, TrainingConfig
from libraries.parameter_server.shard import ShardServer

PLAIN_SGD = functools.partial(torch.optim.SGD, lr=1.0)
SYNC = TrainingConfig(mode="sync", max_staleness=None)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _server(workers: int, config: TrainingConfig, clock: Clock | None = None) -> ShardServer:
    """A shard holding w = [0, 0] that every worker has registered with."""
    server = ShardServer(0, workers, worker_timeout_s=10.0, clock=clock or Clock())
    for worker in range(workers):
        registration = server.register(worker, config, {"w": torch.zeros(2)}, PLAIN_SGD)
        torch.testing.assert_close(registration.wait(), {"w": torch.zeros(2)})
    return server


def _push(server: ShardServer, worker: int, step: int, gradient: list[float]) -> Any:
    return server.push(worker, step, {"w": torch.tensor(gradient)})


def test_sync_step_waits_for_every_worker_and_applies_the_average() -> None:
    server = _server(2, SYNC)
    first = _push(server, 0, 0, [2.0, 0.0])
    assert not first.done()
    assert server.stats().waiting == (0,)
    second = _push(server, 1, 0, [0.0, 4.0])
    expected = {"w": torch.tensor([-1.0, -2.0])}
    torch.testing.assert_close(first.wait(), expected)
    torch.testing.assert_close(second.wait(), expected)
    assert server.stats().updates_applied == 1


def test_a_finished_worker_is_not_waited_for_in_sync_mode() -> None:
    server = _server(2, SYNC)
    waiting = _push(server, 0, 0, [2.0, 2.0])
    finishing = server.finish(1)
    torch.testing.assert_close(waiting.wait(), {"w": torch.tensor([-2.0, -2.0])})
    assert not finishing.done()  # answered once worker 0 is done too
    assert server.finish(0).wait() is None
    assert finishing.wait() is None


def test_the_staleness_bound_holds_a_worker_until_the_slowest_catches_up() -> None:
    server = _server(2, TrainingConfig(mode="async", max_staleness=1))
    # Each push is applied on arrival, whether or not its worker is held afterwards.
    torch.testing.assert_close(
        _push(server, 0, 0, [1.0, 0.0]).wait(), {"w": torch.tensor([-1.0, 0.0])}
    )
    held = _push(server, 0, 1, [1.0, 0.0])  # two steps ahead of worker 1
    assert not held.done()
    assert server.stats().updates_applied == 2
    torch.testing.assert_close(
        _push(server, 1, 0, [0.0, 1.0]).wait(), {"w": torch.tensor([-2.0, -1.0])}
    )
    torch.testing.assert_close(held.wait(), {"w": torch.tensor([-2.0, -1.0])})
    assert server.stats().max_lead == 1


def test_a_finished_slowest_worker_releases_the_held_ones() -> None:
    server = _server(2, TrainingConfig(mode="async", max_staleness=0))
    held = _push(server, 0, 0, [1.0, 1.0])
    assert not held.done()
    server.finish(1)
    assert held.done()


def test_without_a_bound_every_push_is_answered_at_once() -> None:
    server = _server(2, TrainingConfig(mode="async", max_staleness=None))
    for step in range(5):
        assert _push(server, 0, step, [1.0, 1.0]).done()
    stats = server.stats()
    assert (stats.clocks, stats.max_lead, stats.updates_applied) == ((5, 0), 5, 5)


def test_a_silent_worker_fails_the_shard_and_every_waiting_call() -> None:
    clock = Clock()
    server = _server(2, SYNC, clock)
    clock.now = 8.0
    waiting = _push(server, 0, 0, [1.0, 1.0])  # worker 0 is heard from; worker 1 is not
    clock.now = 10.5
    server.check_liveness()
    reply = waiting.wait()
    assert isinstance(reply, Refused)
    assert reply.reason.startswith("worker 1 sent nothing for 10 s")
    assert server.wait_until_finished(poll_s=0.01) == reply.reason
    assert isinstance(server.finish(0).wait(), Refused)


def test_the_worker_timeout_counts_from_when_the_group_formed() -> None:
    clock = Clock()
    server = ShardServer(0, 1, worker_timeout_s=10.0, clock=clock)
    clock.now = 300.0  # the other processes took this long to join
    server.start_worker_timeout()
    clock.now = 305.0
    server.check_liveness()
    assert isinstance(server.register(0, SYNC, {"w": torch.zeros(2)}, PLAIN_SGD).wait(), dict)


def test_heartbeats_keep_a_worker_alive() -> None:
    clock = Clock()
    server = _server(1, SYNC, clock)
    for second in range(1, 30):
        clock.now = float(second)
        server.heartbeat(0)
        server.check_liveness()
    assert server.stats().finished == ()
    assert server.finish(0).wait() is None


def test_later_workers_get_worker_0s_values() -> None:
    server = ShardServer(0, 2, worker_timeout_s=10.0, clock=Clock())
    early = server.register(1, SYNC, {"w": torch.full((2,), 7.0)}, PLAIN_SGD)
    assert not early.done()
    server.register(0, SYNC, {"w": torch.ones(2)}, PLAIN_SGD)
    torch.testing.assert_close(early.wait(), {"w": torch.ones(2)})


@pytest.mark.parametrize(
    ("config", "parameters", "reason"),
    [
        (TrainingConfig("async", None), {"w": torch.zeros(2)}, "worker 1 asked for"),
        (SYNC, {"w": torch.zeros(3)}, "worker 1's model does not match"),
    ],
)
def test_workers_that_disagree_fail_the_job(
    config: TrainingConfig, parameters: dict[str, torch.Tensor], reason: str
) -> None:
    server = ShardServer(0, 2, worker_timeout_s=10.0, clock=Clock())
    first = server.register(0, SYNC, {"w": torch.zeros(2)}, PLAIN_SGD)
    reply = server.register(1, config, parameters, PLAIN_SGD).wait()
    assert isinstance(reply, Refused)
    assert reply.reason.startswith(reason)
    assert first.done()
    assert isinstance(_push(server, 0, 0, [1.0, 1.0]).wait(), Refused)


def test_the_optimizer_is_pluggable_and_keeps_its_state_across_pushes() -> None:
    adam = functools.partial(torch.optim.Adam, lr=0.1)
    server = ShardServer(0, 1, worker_timeout_s=10.0, clock=Clock())
    config = TrainingConfig(mode="async", max_staleness=None)
    server.register(0, config, {"w": torch.ones(2)}, adam).wait()
    reference = torch.ones(2, requires_grad=True)
    optimizer = adam([reference])
    for step, gradient in enumerate(([1.0, -2.0], [0.5, 3.0], [-1.0, 1.0])):
        reply = _push(server, 0, step, gradient).wait()
        reference.grad = torch.tensor(gradient)
        optimizer.step()
        torch.testing.assert_close(reply, {"w": reference.detach()})
