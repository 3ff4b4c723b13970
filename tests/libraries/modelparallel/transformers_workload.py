"""Transformers models from tiny configs (nothing downloaded), their data, and one-process
training on the global batch that the model-parallel runs on them must follow. The step is
the seed's ``train_gpt_simple.py``: ``model(input_ids=..., attention_mask=...,
labels=input_ids)["loss"]``, the loss computed inside the model."""

from __future__ import annotations

import torch
import transformers
from torch import nn

# Where each family keeps its stack of blocks.
STACKS = {
    "gpt2": "transformer.h",
    "llama": "model.layers",
    "neox": "gpt_neox.layers",
    "bert": "bert.encoder.layer",
}
GLOBAL_BATCH = 8
SEQUENCE = 16
VOCABULARY = 96
STEPS = 3
LR = 0.01


def config(family: str) -> transformers.PretrainedConfig:
    """Four blocks each, no dropout (so runs compare exactly), no cache (a training step)."""
    if family == "gpt2":
        return transformers.GPT2Config(
            n_layer=4,
            n_embd=32,
            n_head=4,
            n_positions=SEQUENCE,
            vocab_size=VOCABULARY,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=0,
            eos_token_id=0,
            use_cache=False,
        )
    if family == "llama":
        # Llama ties no embeddings by default; this one does, as small Llamas do.
        return transformers.LlamaConfig(
            num_hidden_layers=4,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=SEQUENCE,
            vocab_size=VOCABULARY,
            tie_word_embeddings=True,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=0,
            use_cache=False,
        )
    if family == "neox":
        return transformers.GPTNeoXConfig(
            num_hidden_layers=4,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            max_position_embeddings=SEQUENCE,
            vocab_size=VOCABULARY,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            bos_token_id=0,
            eos_token_id=0,
            use_cache=False,
        )
    if family == "bert":
        return transformers.BertConfig(
            num_hidden_layers=4,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            max_position_embeddings=SEQUENCE,
            vocab_size=VOCABULARY,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    raise ValueError(family)


def model(family: str) -> nn.Module:
    torch.manual_seed(0)
    made = config(family)
    if family == "bert":
        return transformers.BertForMaskedLM(made)
    return transformers.AutoModelForCausalLM.from_config(made)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and an attention mask of ones (equal token counts per row, so the mean
    of the microbatches' losses is the global batch's)."""
    generator = torch.Generator().manual_seed(200 + step)
    ids = torch.randint(0, VOCABULARY, (GLOBAL_BATCH, SEQUENCE), generator=generator)
    return ids, torch.ones_like(ids)


def loss_of(net: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return net(input_ids=ids, attention_mask=mask, labels=ids)["loss"]  # type: ignore[no-any-return]


def single_process_reference(family: str, steps: int = STEPS) -> dict[str, torch.Tensor]:
    reference = model(family)
    optimizer = torch.optim.Adam(reference.parameters(), lr=LR)
    for step in range(steps):
        optimizer.zero_grad()
        loss_of(reference, *batch(step)).backward()
        optimizer.step()
    return {key: value.detach().clone() for key, value in reference.state_dict().items()}
