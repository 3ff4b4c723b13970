"""Transformers models from tiny configs (nothing downloaded), their data, and one-process
training on the global batch that the model-parallel runs on them must follow. The step is
the seed's ``train_gpt_simple.py``: ``model(input_ids=..., attention_mask=...,
labels=input_ids)["loss"]``, the loss computed inside the model."""

from __future__ import annotations

import torch
import transformers
from torch import nn

# Where each family keeps its stack of blocks (an encoder-decoder's decoder stack).
STACKS = {
    "gpt2": "transformer.h",
    "llama": "model.layers",
    "neox": "gpt_neox.layers",
    "bert": "bert.encoder.layer",
    "mistral": "model.layers",
    "qwen2": "model.layers",
    "opt": "model.decoder.layers",
    "bart": "model.decoder.layers",
}
FAMILIES = tuple(STACKS)
GLOBAL_BATCH = 8
SEQUENCE = 16
VOCABULARY = 96
STEPS = 3
LR = 0.01
# Scenarios that resume from another's checkpoint (which its 3 steps saved), by name.
RESUMED = {
    "gpt2_tensor_parallel_pipeline_resumed": "gpt2_tensor_parallel_pipeline",
    "gpt2_replicated_from_tensor_parallel": "gpt2_tensor_parallel",
    "gpt2_replicated_from_tensor_parallel_pipeline": "gpt2_tensor_parallel_pipeline",
}

# Each family's dropout probabilities, by the name of its configuration's attribute.
DROPOUTS = {
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "llama": ("attention_dropout",),
    "neox": ("hidden_dropout", "attention_dropout"),
    "bert": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    "mistral": ("attention_dropout",),
    "qwen2": ("attention_dropout",),
    "opt": ("dropout", "attention_dropout"),
    "bart": ("dropout", "attention_dropout", "activation_dropout"),
}


def config(family: str, *, dropout: bool = False) -> transformers.PretrainedConfig:
    """The family's configuration as its library ships it (``use_cache``, ``return_dict``,
    attention implementation, tied embeddings and all), with only its sizes shrunk: four
    blocks (two and two for an encoder-decoder), widths of 32, a vocabulary of 96 and
    positions of 16, and token ids moved into that vocabulary. Dropout is off unless asked
    for: runs compared with a reference must compute the same thing."""
    made = _shrunk(family)
    if not dropout:
        for name in DROPOUTS[family]:
            setattr(made, name, 0.0)
    return made


def _shrunk(family: str) -> transformers.PretrainedConfig:
    sizes: dict[str, int] = {"vocab_size": VOCABULARY}
    if family in ("gpt2",):
        # GPT-2's one special token is the vocabulary's last.
        last = VOCABULARY - 1
        return transformers.GPT2Config(
            n_layer=4,
            n_embd=32,
            n_head=4,
            n_positions=SEQUENCE,
            bos_token_id=last,
            eos_token_id=last,
            **sizes,
        )
    decoder = {
        "num_hidden_layers": 4,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": SEQUENCE,
        **sizes,
    }
    if family == "llama":
        return transformers.LlamaConfig(num_key_value_heads=2, **decoder)
    if family == "mistral":
        return transformers.MistralConfig(num_key_value_heads=2, **decoder)
    if family == "qwen2":
        return transformers.Qwen2Config(num_key_value_heads=2, **decoder)
    if family == "neox":
        return transformers.GPTNeoXConfig(**decoder)
    if family == "bert":
        return transformers.BertConfig(**decoder)
    if family == "opt":
        return transformers.OPTConfig(
            num_hidden_layers=4,
            hidden_size=32,
            ffn_dim=64,
            num_attention_heads=4,
            word_embed_proj_dim=32,
            max_position_embeddings=SEQUENCE,
            **sizes,
        )
    if family == "bart":
        return transformers.BartConfig(
            encoder_layers=2,
            decoder_layers=2,
            d_model=32,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            max_position_embeddings=SEQUENCE,
            **sizes,
        )
    raise ValueError(family)


def model(family: str, *, dropout: bool = False) -> nn.Module:
    """The family's language model as its library's ``from_config`` builds it."""
    torch.manual_seed(0)
    made = config(family, dropout=dropout)
    if family == "bert":
        return transformers.BertForMaskedLM(made)
    if family == "bart":
        return transformers.AutoModelForSeq2SeqLM.from_config(made)
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
