"""An experimental decoding attention for compiled generation: a Triton kernel that reads, per row,
only the cache slots between its first and last attended one.

The packed SDPA decoding step (``rlplugs.adapters.trl.packed_gqa``) reads the whole static cache
on every step, empty slots and finished rows included: on the H200 at a batch of 512 over a
3,328-slot cache that is 34.5 of a 40-42 ms step (``decode_profile_bisect.json``), at about a
quarter of the memory bandwidth (39 GB a step). FlexAttention over filled blocks
(``block_decoding.py``) was slower still. Here one Triton program per (row, key/value head) loops
over that row's attended span only, 64 slots at a time, with the query heads of the group as the
rows of one small matrix product (each key/value slot read once) and an online softmax in
float32; a row with no attended slot (a finished row, see ``block_decoding.FinishedRowsMasked``)
reads nothing and gets zeros. Slots inside the span that the mask leaves out stay left out.

The kernel is a ``torch.library`` custom op, so compiled generation (inductor, CUDA graphs) calls
it as an opaque step; its span bounds are plain tensor reductions that inductor compiles. On a
machine without CUDA it runs under Triton's interpreter (``TRITON_INTERPRET=1``), which is how the
test checks it against SDPA. ``generation.py`` (mode ``triton``), ``decode_profile.py --attention
triton`` and ``decode_attention.py`` switch a model to it with :func:`use_triton_decoding`.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():  # read when the kernel below is decorated
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from transformers import AttentionInterface  # noqa: E402
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask  # noqa: E402

from rlplugs.adapters.trl.packed_gqa import packed_gqa_attention  # noqa: E402

TRITON_GQA = "rlplugs_triton_gqa"
SLOTS = 64  # cache slots per loop iteration


@triton.jit
def _span_attention(Q, K, V, M, First, End, O, scale,
                    q_b, q_h, q_g, k_b, k_h, k_s, v_b, v_h, v_s, m_b, m_s, o_b, o_h, o_g,
                    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, DIM: tl.constexpr, SLOTS: tl.constexpr):  # fmt: skip
    row, head = tl.program_id(0), tl.program_id(1)
    groups, dims, slots = tl.arange(0, GROUP_PAD), tl.arange(0, DIM), tl.arange(0, SLOTS)
    real = groups[:, None] < GROUP
    q = tl.load(Q + row * q_b + head * q_h + groups[:, None] * q_g + dims[None, :], mask=real, other=0.0)
    q = (q.to(tl.float32) * (scale * 1.4426950408889634)).to(K.dtype.element_ty)  # scores in log2 units
    top = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    total = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM], tl.float32)
    first, end = tl.load(First + row), tl.load(End + row)
    for start in range(first - first % SLOTS, end, SLOTS):
        at = start + slots
        inside = (at >= first) & (at < end)
        on = tl.load(M + row * m_b + at * m_s, mask=inside, other=0) != 0
        k = tl.load(K + row * k_b + head * k_h + at[:, None] * k_s + dims[None, :], mask=inside[:, None], other=0.0)
        scores = tl.where(on[None, :], tl.dot(q, tl.trans(k)), float("-inf"))
        new_top = tl.maximum(top, tl.max(scores, 1))
        safe = tl.where(new_top == float("-inf"), 0.0, new_top)  # no attended slot yet: nothing to rescale
        p = tl.exp2(scores - safe[:, None])
        rescale = tl.exp2(top - safe)
        v = tl.load(V + row * v_b + head * v_h + at[:, None] * v_s + dims[None, :], mask=inside[:, None], other=0.0)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        top = new_top
    out = tl.where(total[:, None] > 0, acc / tl.where(total > 0, total, 1.0)[:, None], 0.0)
    tl.store(O + row * o_b + head * o_h + groups[:, None] * o_g + dims[None, :], out.to(O.dtype.element_ty), mask=real)


@torch.library.custom_op("rlplugs::span_attention", mutates_args=())
def span_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                   first: torch.Tensor, end: torch.Tensor, scale: float) -> torch.Tensor:  # fmt: skip
    """``query`` ``(batch, kv_heads, group, dim)``, ``key``/``value`` ``(batch, kv_heads, cache, dim)``,
    ``mask`` ``(batch, cache)`` as uint8, ``first``/``end`` ``(batch,)`` int32: the span each row
    attends in. Returns the attention output in ``query``'s shape."""
    batch, kv_heads, group, dim = query.shape
    out = torch.empty_like(query)
    _span_attention[(batch, kv_heads)](
        query, key, value, mask, first, end, out, scale, *query.stride()[:3], *key.stride()[:3], *value.stride()[:3],
        *mask.stride(), *out.stride()[:3], GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), DIM=dim,
        SLOTS=SLOTS, num_warps=4, num_stages=2,
    )  # fmt: skip
    return out


@span_attention.register_fake
def _(query, key, value, mask, first, end, scale):
    return torch.empty_like(query)


def triton_gqa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, **kwargs) -> tuple[torch.Tensor, None]:
    """``packed_gqa_attention``'s contract; a decoding step with a boolean mask over the whole cache
    goes to :func:`span_attention`, anything else to the packed attention."""
    batch, heads, q_len, dim = query.shape
    length = key.shape[2]
    plain = attention_mask is None or attention_mask.dtype != torch.bool or attention_mask.shape[-1] != length
    if q_len != 1 or plain or kwargs.get("position_bias") is not None:
        return packed_gqa_attention(module, query, key, value, attention_mask, **kwargs)
    mask = attention_mask[:, 0, -1, :]
    slot = torch.arange(length, device=mask.device, dtype=torch.int32)
    first = torch.where(mask, slot, length).amin(-1).to(torch.int32)
    end = torch.where(mask, slot + 1, 0).amax(-1).to(torch.int32)
    grouped = query.reshape(batch, key.shape[1], heads // key.shape[1], dim).contiguous()
    scale = kwargs.get("scaling") or dim**-0.5
    out = span_attention(grouped, key, value, mask.to(torch.uint8), first, end, scale)
    return out.reshape(batch, 1, heads, dim), None


def use_triton_decoding(model: torch.nn.Module) -> None:
    """Switch ``model`` (SDPA or packed GQA) to :func:`triton_gqa_attention`, with finished rows
    masked out (``block_decoding.FinishedRowsMasked``)."""
    from block_decoding import FinishedRowsMasked

    AttentionInterface.register(TRITON_GQA, triton_gqa_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(TRITON_GQA, sdpa_mask)
    model.set_attn_implementation(TRITON_GQA)
    FinishedRowsMasked(model)
