"""A GPT-2's state_dict between transformers' names and the model-parallel library's.

SageMaker's library replaces a transformers GPT-2 made for tensor parallelism with a
transformer of its own, whose parameters have other names, so a script translates a
pretrained state_dict before loading it and a saved one before handing it to
transformers. Runyard keeps transformers' modules as they are (its tensor parallelism
splits them in place), so the library's form of a GPT-2 is transformers' own: both
translations return the same entries. A copy of the mapping, never the one given: a
script may change the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def translate_hf_state_dict_to_smdistributed_gpt2(
    state_dict: Mapping[str, Any], max_seq_len: int | None = None
) -> dict[str, Any]:
    """A transformers GPT-2's state_dict as the library's model loads it."""
    return dict(state_dict)


def translate_state_dict_to_hf_gpt2(
    state_dict: Mapping[str, Any], max_seq_len: int | None = None
) -> dict[str, Any]:
    """The library's GPT-2 state_dict as transformers' ``GPT2LMHeadModel`` loads it."""
    return dict(state_dict)
