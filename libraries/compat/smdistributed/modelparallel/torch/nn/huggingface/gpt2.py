"""``smdistributed.modelparallel.torch.nn.huggingface.gpt2``: ``libraries.modelparallel.nn.
huggingface.gpt2``, re-exported."""

from libraries.modelparallel.nn.huggingface.gpt2 import (
    translate_hf_state_dict_to_smdistributed_gpt2 as translate_hf_state_dict_to_smdistributed_gpt2,
)
from libraries.modelparallel.nn.huggingface.gpt2 import (
    translate_state_dict_to_hf_gpt2 as translate_state_dict_to_hf_gpt2,
)
