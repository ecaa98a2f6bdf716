"""Decode-step attention that reads each key/value head once, for compiled generation.

Models with grouped-query attention (SmolLM2: 9 query heads over 3 key/value heads; Qwen3.5's
full-attention layers) share one key/value head among several query heads. transformers' SDPA
path lets the kernel do that sharing (``enable_gqa``) only when there is no attention mask; with
a mask it copies every key/value head once per query head (``repeat_kv``) on every layer of every
decoding step. A static cache always has a mask (its empty slots), so compiled decoding copied
``num_key_value_groups`` times the whole cache per step: at a batch of 256 on the H200 a
compiled step took longer than a plain dynamic-cache step (``benchmarks/results/generation.json``).

During decoding there is one query position, so the query heads of a group can stand in the
query-length dimension instead: ``(batch, heads, 1, dim)`` is viewed as
``(batch, kv_heads, group, dim)``, and one ordinary masked attention over the cache gives every
query head its output with the keys and values read once. The mask, shared by all heads and all
query positions, broadcasts unchanged. (Writing this attention out, two matrix products and a
float32 softmax, was faster alone in ``benchmarks/decode_attention.py`` but slower in the real
GRPO step; see ``benchmarks/results/generation.json``.) Prefill and training (more than one
query position), and layers without groups, go to transformers' SDPA function as before.

Packed GQA still reads the whole static cache on every step; on CUDA compiled generation runs
:mod:`rlplugs.adapters.trl.span_gqa` instead, which reads only what each live row attends
(:func:`use_decoding_attention` picks).
"""

from __future__ import annotations

from importlib.util import find_spec

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

# The attn_implementation name of packed GQA; every decoding attention of rlplugs is named with
# the prefix, so one can replace another.
PACKED_GQA = "rlplugs_packed_gqa"
PREFIX = "rlplugs_"
# Prompt-length bucket for compiled generation: prompts are left-padded to a multiple of it, so a
# run compiles once per bucket its prompts reach, not once per prompt length.
COMPILE_BUCKET = 256
# The generation settings of compiled decoding: a static cache, and transformers' auto-compile of
# the decoding step left on (TRL switches it off in its generation config).
COMPILED_DECODING = {"cache_implementation": "static", "disable_compile": False}


def packed_gqa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query`` is ``(batch, heads, q_len, dim)``,
    the result ``(batch, q_len, heads, dim)``."""
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, dim = query.shape
    if q_len != 1 or groups == 1 or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    grouped = query.reshape(batch, heads // groups, groups, dim)
    out = torch.nn.functional.scaled_dot_product_attention(
        grouped, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(batch, 1, heads, value.shape[-1]), None


def span_gqa_runs(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether span GQA's kernel runs for weights of ``dtype`` on ``device`` with heads of ``head_dim``."""
    return (
        device.type == "cuda"
        and dtype in (torch.bfloat16, torch.float16)
        and head_dim & (head_dim - 1) == 0
        and find_spec("triton") is not None
    )


def use_decoding_attention(model: torch.nn.Module) -> None:
    """Switch ``model`` to compiled generation's decoding attention: span GQA's Triton kernel where
    it runs (weights in bf16/fp16 on a CUDA device, Triton installed, a power-of-two head size),
    packed GQA anywhere else. A model built with another attention than SDPA is left as it is."""
    if not switchable(model):
        return
    config = model.config.get_text_config()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if span_gqa_runs(model.device, model.dtype, head_dim):
        from rlplugs.adapters.trl.span_gqa import use_span_gqa

        use_span_gqa(model)
    else:
        use_packed_gqa(model)


def switchable(model: torch.nn.Module) -> bool:
    """Whether ``model`` runs SDPA or one of rlplugs' decoding attentions; a model built with
    another attention (flash, eager) was chosen so and is left as it is."""
    name = model.config._attn_implementation or ""
    return name == "sdpa" or name.startswith(PREFIX)


def use_packed_gqa(model: torch.nn.Module) -> None:
    """Switch ``model`` from SDPA (or another of rlplugs' decoding attentions) to
    :func:`packed_gqa_attention` (its masks stay SDPA's)."""
    if switchable(model):
        switch_attention(model, PACKED_GQA, packed_gqa_attention)


def switch_attention(model: torch.nn.Module, name: str, attention) -> None:
    """Register ``attention`` (transformers' attention-function signature, SDPA's masks) as
    ``name`` and switch ``model`` to it: how every rlplugs decoding attention is switched on."""
    AttentionInterface.register(name, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    model.set_attn_implementation(name)
