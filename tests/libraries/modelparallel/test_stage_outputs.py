"""What a model returns that is not a tensor, and what one stage passes the next that is not
laid out contiguously, split by torch's pipelining as the library splits a model at a
job's first step."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from libraries.modelparallel.calls import ModelCall
from libraries.modelparallel.pipeline import split

# torch's pipeline() copies the first stage's argument structure with LeafSpecs, which
# torch itself now warns about.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"
)


class Cache:
    """An object torch's tracer does not know, as a transformers key/value cache is."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys


class Returns(nn.Module):
    """Two blocks; returns its output beside a mask, a step count, a name, a cache when
    ``use_cache`` (on unless said otherwise, as in transformers' defaults) and, with
    ``keep_object``, a cache whatever the call says."""

    def __init__(self, keep_object: bool = False) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 8)
        self.keep_object = keep_object
        self.cached_calls = 0

    def forward(self, x: torch.Tensor, use_cache: bool = True) -> dict[str, Any]:
        hidden = self.first(x)
        # A view: the mask expanded over the features, as attention masks are.
        mask = (x[:, :1] > 0).expand(-1, 8)
        out = self.second(hidden) * mask
        returned: dict[str, Any] = {"out": out, "mask": mask, "steps": 3, "name": "returns"}
        if use_cache:
            self.cached_calls += 1
            returned["cache"] = Cache(hidden)
        elif self.keep_object:
            returned["cache"] = Cache(hidden)
        return returned


def _split(net: nn.Module, x: torch.Tensor) -> tuple[Any, Any]:
    pipe, returned = split(net, ModelCall((), {"x": x}), ["second"])
    with torch.no_grad():
        return pipe, returned.rebuilt(pipe(x=x))


def test_stages_run_the_model_without_its_cache_and_give_back_its_other_values() -> None:
    torch.manual_seed(0)
    net, x = Returns(), torch.randn(4, 8)
    expected = net(x, use_cache=False)
    _, got = _split(net, x)
    # Traced without the cache: the structure is the model's called with use_cache=False.
    assert net.cached_calls == 0
    assert got.keys() == {"out", "mask", "steps", "name"}
    torch.testing.assert_close(got["out"], expected["out"])
    assert torch.equal(got["mask"], expected["mask"])
    assert (got["steps"], got["name"]) == (3, "returns")


def test_an_object_no_stage_can_carry_comes_back_as_none_and_is_named() -> None:
    torch.manual_seed(0)
    net, x = Returns(keep_object=True), torch.randn(4, 8)
    _, got = _split(net, x)
    assert got["cache"] is None
    torch.testing.assert_close(got["out"], net(x, use_cache=False)["out"])
    _, returned = split(net, ModelCall((), {"x": x}), ["second"])
    assert returned.dropped == ("['cache'] (Cache)",)


def test_a_view_passed_to_the_next_stage_is_sent_laid_out_contiguously() -> None:
    torch.manual_seed(0)
    net, x = Returns(), torch.randn(4, 8)
    pipe, _ = split(net, ModelCall((), {"x": x}), ["second"])
    first = pipe.get_stage_module(0)
    with torch.no_grad():
        sent = first(x=x)
    # The mask (an expanded view in the model) and the hidden state both go on.
    assert len(sent) == 2
    assert all(tensor.is_contiguous() for tensor in sent)
    # ... and the next stage expects them so: its receive buffers are made from this.
    received = [n for n in pipe.get_stage_module(1).graph.nodes if n.op == "placeholder"]
    assert all(node.meta["val"].is_contiguous() for node in received)
