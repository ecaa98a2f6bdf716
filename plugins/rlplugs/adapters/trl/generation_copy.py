"""A half-precision copy of an fp32 model that compiled generation decodes with under mixed precision.

Mixed-precision training (``bf16``/``fp16``) keeps the weights in fp32 and runs each forward pass
under autocast. There a decoding step's keys leave the rotary embedding in fp32 (its cos/sin
follow the fp32 hidden states) while its values leave their projection in bf16. transformers'
static cache takes both buffers' dtype from the keys up to 5.23, so the first prefill fails
(``index_copy_(): ... Float and BFloat16``, seen on the H200 with 5.17); from 5.24 it takes each
from its own tensor, and every decoding step would then cast the fp32 key cache to bf16 in every
layer. So compiled generation decodes on a copy of the model in the autocast dtype, run without
autocast, as vLLM-based trainers generate from a half-precision copy: one dtype throughout, half
the cache bytes. The copy takes the trained weights whenever the optimizer has stepped since its
last copy, which is once per generation batch. It needs whole weights in one process, so sharded
training (FSDP, ZeRO-3) and adapters on an fp32 base are refused with what to do instead.
"""

from __future__ import annotations

import copy

import torch

from rlplugs.adapters.trl.packed_gqa import use_decoding_attention

NEEDS_WHOLE_WEIGHTS = (
    "compile_generation with float32 weights under bf16/fp16 mixed precision decodes on a half-precision "
    "copy of the model, which needs its whole weights in one process: load the model in the mixed-precision "
    "dtype (model_init_kwargs dtype), or drop compile_generation"
)


class GenerationCopy:
    """The model rebuilt from its config in ``dtype`` on the model's device, with packed GQA."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype):
        from transformers import AutoModelForCausalLM

        config = copy.deepcopy(model.config)  # its own: the attention switch below is the copy's alone
        self.model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(model.device).eval()
        self.model.generation_config = model.generation_config
        use_decoding_attention(self.model)
        self.synced_at: int | None = None

    @torch.no_grad()
    def sync(self, model: torch.nn.Module, step: int) -> torch.nn.Module:
        """The copy, holding ``model``'s weights as of optimizer step ``step`` (copied once per step)."""
        if self.synced_at != step:
            self.model.load_state_dict(model.state_dict())  # copy_ casts into the copy's own tensors
            self.synced_at = step
        return self.model
