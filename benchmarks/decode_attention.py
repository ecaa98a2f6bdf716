"""One decoding step's attention over a static cache, three ways side by side in one run.

Compiled generation decodes over a static cache, which always carries a mask. This times the
attention of one decoding step (every layer of SmolLM2-135M's shape: 30 layers, 9 query heads
over 3 key/value heads, head size 64, bf16) at several batch sizes, eager and compiled:

- ``sdpa_repeat``: transformers' SDPA function, which copies each key/value head per query head
  when there is a mask (what compiled generation ran before ``rlplugs.adapters.trl.packed_gqa``);
- ``packed``: the query heads of a group in the query-length dimension, handed to SDPA
  (``packed_gqa_attention``, what compiled generation runs off CUDA);
- ``written_out``: the same packing with the attention written out (two matrix products and a
  float32 softmax), which avoids SDPA's choice of kernel;
- ``span`` (with CUDA only): ``span_gqa_attention``, a Triton kernel that reads only the filled
  part (what compiled generation runs on CUDA; results before it moved into rlplugs call it
  ``triton``).

Each way's largest difference from ``sdpa_repeat`` on the same inputs is written beside its time.

It prints milliseconds per step and each way's speed-up over ``sdpa_repeat``; the cache's
bytes read per step divided by the time gives the bandwidth reached.

    python benchmarks/decode_attention.py --out benchmarks/results/decode_attention.json --key h200
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

LAYERS, HEADS, KV_HEADS, DIM = 30, 9, 3, 64


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default="64,256,512")
    p.add_argument("--cache", type=int, default=3328, help="static cache length (prompt bucket + 2,048 new tokens)")
    p.add_argument("--filled", type=float, default=0.6, help="share of the cache filled so far")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", default="benchmarks/results/decode_attention.json")
    p.add_argument("--key", default=None)
    return p.parse_args()


def ways():
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from rlplugs.adapters.trl.packed_gqa import packed_gqa_attention

    def written_out(module, query, key, value, mask, scaling):
        batch = query.shape[0]
        grouped = query.reshape(batch, KV_HEADS, HEADS // KV_HEADS, DIM)
        scores = torch.matmul(grouped, key.transpose(-1, -2)) * scaling
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        out = torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype), value)
        return out.reshape(batch, 1, HEADS, DIM), None

    found = {"sdpa_repeat": sdpa_attention_forward, "packed": packed_gqa_attention, "written_out": written_out}
    if torch.cuda.is_available():
        from rlplugs.adapters.trl.span_gqa import span_gqa_attention

        found["span"] = span_gqa_attention
    return found


def inputs(batch: int, a):
    """A decoding step's query, every layer's (key, value) cache and the mask of its filled slots."""
    import torch

    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = HEADS // KV_HEADS, True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    query = torch.randn(batch, HEADS, 1, DIM, device=device, dtype=dtype)
    caches = [(torch.randn(batch, KV_HEADS, a.cache, DIM, device=device, dtype=dtype),) * 2 for _ in range(LAYERS)]
    mask = torch.zeros(batch, 1, 1, a.cache, dtype=torch.bool, device=device)
    mask[..., : int(a.cache * a.filled)] = True
    return module, query, caches, mask


def largest_differences(attends: dict, batch: int, a) -> dict:
    """Each way's largest absolute difference from ``sdpa_repeat`` in the first layer."""
    module, query, caches, mask = inputs(batch, a)
    key, value = caches[0]
    outs = {way: attend(module, query, key, value, mask, scaling=DIM**-0.5)[0].float() for way, attend in attends.items()}
    return {way: round((out - outs["sdpa_repeat"]).abs().max().item(), 5) for way, out in outs.items()}


def time_step(attend, batch: int, a, compiled: bool) -> float:
    """Milliseconds for one decoding step's attention in all layers (median of ``--repeats``)."""
    import statistics

    import torch

    module, query, caches, mask = inputs(batch, a)
    device = query.device.type

    def step():
        return [attend(module, query, k, v, mask, scaling=DIM**-0.5)[0] for k, v in caches]

    run = torch.compile(step) if compiled else step
    for _ in range(3):  # warm-up (and the compile)
        run()
    times = []
    for _ in range(a.repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            import time

            t = time.perf_counter()
            run()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    import torch

    a = parse()
    load = os.getloadavg()[0]
    results: dict = {"shape": {"layers": LAYERS, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": DIM,
                               "cache": a.cache, "filled": a.filled}, "ms_per_step": {}, "speedup_vs_sdpa_repeat": {}}  # fmt: skip
    batches = [int(b) for b in a.batches.split(",")]
    results["cache_gb_per_step"] = {str(b): round(2 * LAYERS * b * KV_HEADS * a.cache * DIM * 2 / 1e9, 2) for b in batches}
    sys.path.insert(0, str(Path(__file__).parent))
    attends = ways()
    results["max_abs_diff_vs_sdpa_repeat"] = {str(b): largest_differences(attends, b, a) for b in batches}
    for compiled in (False, True):
        for batch in batches:
            name = f"{'compiled' if compiled else 'eager'}@{batch}"
            ms = {way: round(time_step(attend, batch, a, compiled), 3) for way, attend in attends.items()}
            results["ms_per_step"][name] = ms
            results["speedup_vs_sdpa_repeat"][name] = {w: round(ms["sdpa_repeat"] / t, 2) for w, t in ms.items()}
            print(name, ms, flush=True)
    from result_file import write_result

    write_result(a.out, results, load, key=a.key, shared=not torch.cuda.is_available())


if __name__ == "__main__":
    main()
