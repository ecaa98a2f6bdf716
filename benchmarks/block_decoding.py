"""An experimental decoding attention for compiled generation that reads only filled cache blocks.

A static cache is as long as the longest completion may grow, and the packed SDPA decoding step
(``rlplugs.adapters.trl.packed_gqa``) reads all of it on every step, empty slots and rows that
have finished included: on the H200 at a batch of 512 over a 3,328-slot cache that is 34.5 of a
40-42 ms step (``decode_profile_bisect.json``, ``generation.json`` ``h200_profile``). Here a
decoding step goes to FlexAttention instead, with a block mask built each step from the attention
mask: only the 128-slot blocks of the cache that hold a row's tokens are read, and a row that has
produced its end-of-sequence token reads none (``rlplugs.adapters.trl.span_gqa.FinishedRowsMasked``
clears its mask; its output is discarded by ``generate`` anyway).

It lives with the benchmarks, not in rlplugs, because it has not been shown faster (span GQA, a
Triton kernel over each row's filled span, is what compiled generation runs on CUDA): the only
measured GRPO step of ``generation.py --modes blocks@512`` on the H200, the first, took 418.5 s
against 105.6-148.6 s for the packed decoding's first steps, compile included in both, and
FlexAttention compiles about 3x longer (``decoding_compile_cpu.json``), which accounts for about
80 s of that gap at most; no later step was measured (``generation.json``, ``h200_blocks``).
``generation.py`` (mode ``blocks``), ``decode_profile.py --attention blocks`` and
``decoding_compile.py`` switch a model to it with :func:`use_block_decoding`.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from rlplugs.adapters.trl.packed_gqa import PREFIX, packed_gqa_attention, switch_attention
from rlplugs.adapters.trl.span_gqa import mask_finished_rows

BLOCK_GQA = PREFIX + "block_gqa"
# Cache slots per block of the block mask: FlexAttention's default key/value block.
KV_BLOCK = 128


def filled_blocks(mask: torch.Tensor) -> BlockMask:
    """The block mask of a decoding step from its ``(batch, cache)`` boolean attention mask: per row
    the blocks wholly attended (no mask evaluated inside them) and the partly attended ones. The
    cache need not fill its last block (transformers sizes it prompt + new tokens - 1)."""
    batch, length = mask.shape
    blocks = torch.nn.functional.pad(mask, (0, -length % KV_BLOCK)).view(batch, -1, KV_BLOCK)
    full, some = blocks.all(-1), blocks.any(-1)

    def listed(chosen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        count = chosen.sum(-1, dtype=torch.int32)
        order = torch.argsort((~chosen).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return count[:, None, None], order[:, None, None, :]

    def attended(b, h, q, kv):  # the unpadded mask: inductor cannot lower a padded one here
        return mask[b, kv.clamp(max=length - 1)]  # slots past the cache are masked by FlexAttention

    partial, whole = listed(some & ~full), listed(full)
    return BlockMask.from_kv_blocks(*partial, *whole, BLOCK_SIZE=KV_BLOCK, mask_mod=attended, seq_lengths=(1, length))


def block_gqa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, **kwargs) -> tuple[torch.Tensor, None]:
    """``packed_gqa_attention``'s contract; a decoding step with a boolean mask over the whole
    cache reads only the blocks :func:`filled_blocks` lists (FlexAttention shares the key/value
    heads itself); anything else goes to the packed attention."""
    length = key.shape[2]
    plain = attention_mask is None or attention_mask.dtype != torch.bool or attention_mask.shape[-1] != length
    if query.shape[2] != 1 or plain or kwargs.get("position_bias") is not None:
        return packed_gqa_attention(module, query, key, value, attention_mask, **kwargs)
    out = flex_attention(query, key, value, block_mask=filled_blocks(attention_mask[:, 0, -1, :]), scale=kwargs.get("scaling"),
                         enable_gqa=query.shape[1] != key.shape[1])  # fmt: skip
    return out.transpose(1, 2), None


def use_block_decoding(model: torch.nn.Module) -> None:
    """Switch ``model`` (SDPA or packed GQA) to :func:`block_gqa_attention`, finished rows masked
    out (``span_gqa.FinishedRowsMasked``)."""
    switch_attention(model, BLOCK_GQA, block_gqa_attention)
    mask_finished_rows(model, BLOCK_GQA)
