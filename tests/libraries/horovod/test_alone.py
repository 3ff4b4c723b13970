"""A Horovod script started alone (no rank in its environment) is a job of one, as with
Horovod: every call works, and DistributedOptimizer steps as its optimizer would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from libraries import horovod as hvd
from tests.libraries.horovod.job import workload


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    hvd.init()
    yield
    hvd.shutdown()


def test_calls_before_init_say_to_call_it() -> None:
    with pytest.raises(ValueError, match=r"call hvd\.init\(\) first"):
        hvd.rank()


@pytest.mark.usefixtures("alone")
def test_a_process_alone_is_rank_0_of_1() -> None:
    assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (0, 1, 0, 1)
    assert (hvd.cross_rank(), hvd.cross_size()) == (0, 1)
    assert hvd.allreduce(torch.tensor([3.0])).item() == 3.0
    assert hvd.allreduce(torch.tensor([3.0]), op=hvd.Sum, postscale_factor=2.0).item() == 6.0
    assert hvd.allgather(torch.ones(2, 3)).shape == (2, 3)
    assert hvd.broadcast_object({"a": 1}, root_rank=0) == {"a": 1}
    with pytest.raises(ValueError, match="root_rank=1 is not a rank of this job of 1"):
        hvd.broadcast(torch.ones(1), root_rank=1)


@pytest.mark.usefixtures("alone")
def test_distributed_optimizer_steps_as_its_optimizer() -> None:
    expected = workload.reference()
    model = workload.make_model(workload.ROOT_SEED)
    optimizer = hvd.DistributedOptimizer(
        workload.make_optimizer(model), named_parameters=model.named_parameters()
    )
    assert isinstance(optimizer, torch.optim.SGD)
    for step in range(workload.STEPS):
        inputs, labels = workload.global_batch(step)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    for key, value in model.state_dict().items():
        assert torch.equal(value, expected[key]), key


@pytest.mark.usefixtures("alone")
def test_step_hooks_run_once_and_schedulers_see_the_step() -> None:
    model = workload.make_model(0)
    optimizer = hvd.DistributedOptimizer(workload.make_optimizer(model))
    calls: list[str] = []
    optimizer.register_step_post_hook(lambda *_: calls.append("post"))
    # load_state_dict re-wraps the class's step for hooks: still once.
    optimizer.load_state_dict(optimizer.state_dict())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.ones(1, workload.FEATURES)).sum().backward()
        optimizer.step()
        scheduler.step()
    assert calls == ["post", "post"]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(workload.LR / 4)


@pytest.mark.usefixtures("alone")
def test_synchronize_then_skip_synchronize_for_clipping() -> None:
    model = workload.make_model(0)
    optimizer = hvd.DistributedOptimizer(workload.make_optimizer(model))
    model(torch.ones(1, workload.FEATURES)).sum().backward()
    optimizer.synchronize()
    nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    with optimizer.skip_synchronize():
        optimizer.step()
    with pytest.raises(ValueError, match=r"op must be hvd\.Average or hvd\.Sum"):
        hvd.DistributedOptimizer(workload.make_optimizer(model), op=hvd.Max)
    with pytest.raises(hvd.NotOfferedError, match=r"op=hvd\.Adasum"):
        hvd.DistributedOptimizer(workload.make_optimizer(model), op=hvd.Adasum)
