"""The transformers families a SageMaker user brings, split where automatic partitioning
cuts them and traced by torch's pipelining, as the library does at a job's first step; the
stages run one after another in this process give what the model itself gives."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from contract.modelparallel import Parameters
from libraries.modelparallel.calls import ModelCall
from libraries.modelparallel.pipeline import split
from libraries.modelparallel.projections import by_rank, in_model_order
from libraries.modelparallel.splits import split_points
from libraries.modelparallel.tensor import TensorParallelError, planned
from libraries.modelparallel.ties import ties_of
from tests.libraries.modelparallel.transformers_workload import FAMILIES, STACKS, batch, model

# The input embedding and the output projection, where the family's default
# configuration ties them (Llama, Mistral, Qwen2 and GPT-NeoX untie them by default).
TIED = {
    "gpt2": ("transformer.wte.weight", "lm_head.weight"),
    "llama": None,
    "neox": None,
    "bert": ("bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"),
    "mistral": None,
    "qwen2": None,
    "opt": ("model.decoder.embed_tokens.weight", "lm_head.weight"),
    "bart": ("model.shared.weight", "lm_head.weight"),
}


def _blocks(net: nn.Module) -> list[str]:
    """The names of the model's transformer blocks (an encoder's, then a decoder's)."""
    return [
        f"{name}.{index}"
        for name, stack in net.named_modules()
        if isinstance(stack, nn.ModuleList)
        for index in range(len(stack))
    ]


@pytest.mark.parametrize("family", list(STACKS))
def test_a_family_splits_into_stages_that_compute_what_the_model_does(family: str) -> None:
    # As its library builds it: the key/value cache on, a ModelOutput returned.
    net = model(family).eval()
    assert net.config.use_cache
    assert net.config.return_dict
    ids, mask = batch(0)
    ids, mask = ids[:2], mask[:2]
    example = ModelCall((), {"input_ids": ids, "attention_mask": mask, "labels": ids})
    points = split_points(net, Parameters(partitions=2), 2, example, {}, lambda _: None)
    # Four even blocks, and lighter modules around them: the second stage begins at a
    # block past the first (which one, the measured times say), or an encoder-decoder's
    # at its decoder (its learned positions hold parameters too).
    blocks = _blocks(net)
    assert len(blocks) == 4
    (point,) = points
    assert point in blocks[1:] or (family == "bart" and point.startswith("model.decoder."))
    with torch.no_grad():
        expected = net(**example.kwargs)
        pipe, returned = split(net, example, points)
        flat = pipe(**example.kwargs)
    got = returned.rebuilt(flat)
    # The model's own output, less its key/value cache, which the stages do not compute
    # (BERT keeps none, BART none when given labels).
    assert type(got) is type(expected)
    assert ("cache" in expected) == (family not in ("bert", "bart"))
    assert list(got.keys()) == [key for key in expected if key != "cache"]
    torch.testing.assert_close(got["loss"], expected["loss"])
    torch.testing.assert_close(got.logits, expected.logits)
    ties = ties_of(net, pipe)
    if TIED[family] is None:
        assert ties == []
    else:
        # BERT ties its decoder's bias too, which only the last stage uses.
        (tie,) = [tie for tie in ties if set(TIED[family]) <= set(tie.names)]
        # The embedding on the first stage, the projection onto the vocabulary on the last.
        assert tie.stages == (0, 1)


def test_tensor_parallelism_splits_the_families_it_knows_and_names_what_it_refuses() -> None:
    for family in FAMILIES:
        net = model(family)
        blocks = planned(net, {id(m): True for m in net.modules()}, 2)
        if family == "bart":
            # The encoder's layers, then the decoder's, whose cross-attention is split too.
            assert [(name, plan.family) for name, _, plan in blocks] == [
                ("model.encoder.layers.0", "OPT, BART (encoder)"),
                ("model.encoder.layers.1", "OPT, BART (encoder)"),
                ("model.decoder.layers.0", "BART (decoder)"),
                ("model.decoder.layers.1", "BART (decoder)"),
            ]
        else:
            assert [name for name, _, _ in blocks] == [f"{STACKS[family]}.{i}" for i in range(4)]
    # Marked only where the script said: one layer of four.
    net = model("llama")
    only = planned(net, {id(net.model.layers[2]): True}, 2)
    assert [name for name, _, _ in only] == ["model.layers.2"]
    # ... and a marked module kept whole inside a marked model stays whole.
    kept = {id(m): True for m in net.modules()} | {id(net.model.layers[0]): False}
    assert len(planned(net, kept, 2)) == 3
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    with pytest.raises(TensorParallelError, match=r"no module marked .* GPT-2"):
        planned(mlp, {id(mlp): True}, 2)
    # GPT-2's c_attn is three parts of 32 features: each part must divide.
    gpt2 = model("gpt2")
    with pytest.raises(
        TensorParallelError, match=r"32 features of transformer\.h\.0\.attn\.c_attn$"
    ):
        planned(gpt2, {id(m): True for m in gpt2.modules()}, 3)
    # Four heads do not divide among three ranks.
    with pytest.raises(TensorParallelError, match="does not divide"):
        planned(net, {id(m): True for m in net.modules()}, 3)


def test_a_projection_of_several_parts_is_held_by_rank_and_given_back_in_model_order() -> None:
    # Query, key and value side by side, 4 features each, over 2 ranks.
    fused = torch.arange(12.0).repeat(3, 1)
    held = by_rank(fused, axis=1, parts=3, degree=2)
    # Rank 0's half of each part, then rank 1's.
    assert held[0].tolist() == [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]
    assert torch.equal(in_model_order(held, axis=1, parts=3, degree=2), fused)
