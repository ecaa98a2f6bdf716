"""Where a compiled decoding step's time goes (issue 4/8): ``torch.profiler`` over real steps.

At a batch of 512 a compiled decoding step of SmolLM2-135M took about 42 ms in the GRPO step,
while its attention alone takes about 18 ms (``decode_attention.json``). This script runs the
decoding the GRPO trainer's ``compile_generation`` runs (static cache, sampling at T = 0.7;
``--attention`` picks the decoding attention) on random prompts, times a step with and without the profiler, and writes how much of
a step the GPU is busy and which operations take the time, on the GPU and on the host.

    python3 benchmarks/decode_profile.py --out decode_profile.json --batch 512
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default=None, help="model dir (default: SmolLM2-135M-Instruct via rlplugs.testing.smollm2)")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--prompt", type=int, default=1280, help="prompt tokens (the bucket factorio prompts pad to)")
    p.add_argument("--cache", type=int, default=3328, help="static cache length: prompt + max new tokens")
    p.add_argument("--steps", type=int, default=64, help="decoding steps timed and profiled")
    p.add_argument("--device", default="cuda")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--train_mode", action="store_true", help="decode with the model in train mode, as the GRPO step does")
    p.add_argument("--accelerate", action="store_true",
                   help="decode through accelerate's bf16 mixed-precision forward wrapper, as the trainer's model does")
    p.add_argument("--attention", choices=("packed", "blocks", "span"), default="packed",
                   help="decoding attention: packed_gqa's, block_decoding.py's, which reads only the filled cache "
                        "blocks (here the prompt and the steps decoded so far), or span_gqa's (what compiled "
                        "generation runs on CUDA), which reads each row's attended span")
    p.add_argument("--left_pad", action="store_true", help="left-pad each row by a random 0..prompt/2 tokens, as TRL does")
    a = p.parse_args()
    if a.cache < a.prompt + a.steps + 1:
        p.error(f"--cache {a.cache} cannot hold --prompt {a.prompt} plus {a.steps + 1} decoding steps")
    return a


def generate(model, ids, mask, steps: int, cache: int):
    """``steps`` decoding steps over a static cache of ``cache`` positions: ``max_new_tokens`` sizes
    the cache (transformers derives its length from it, ignoring ``max_length``), a stopping
    criterion ends the call after ``steps``, and ``min_new_tokens`` keeps every row decoding."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    from rlplugs.adapters.trl.packed_gqa import COMPILED_DECODING

    class StopAfter(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            done = input_ids.shape[1] >= ids.shape[1] + steps
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

    return model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=0.7,
                          max_new_tokens=cache - ids.shape[1], min_new_tokens=steps,
                          stopping_criteria=StoppingCriteriaList([StopAfter()]), **COMPILED_DECODING)  # fmt: skip


def timed(fn) -> float:
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def summarize(prof, wall_s: float, steps: int, top: int) -> dict:
    """How busy the GPU was over ``wall_s`` (kernel time / wall, prefill included), and the
    operations with the most GPU and host time, in ms per decoding step (``steps`` of them).
    ``generation.py --profile_step`` summarises the trainer's generation call the same way."""
    events = prof.key_averages()
    kernel_us = sum(e.self_device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)

    def ranked(key: str) -> list[dict]:
        return [{"op": e.key[:90], "calls": e.count, "self_ms_per_step": round(getattr(e, key) / 1000 / steps, 3)}
                for e in sorted(events, key=lambda e: getattr(e, key), reverse=True)[:top]]  # fmt: skip

    return {"gpu_busy_fraction": round(kernel_us / 1e6 / wall_s, 3),
            "top_gpu": ranked("self_device_time_total"), "top_host": ranked("self_cpu_time_total")}  # fmt: skip


def profiled(fn):
    """``fn()`` under ``torch.profiler`` (CPU, and CUDA where there is one): its result, the wall
    seconds it took and the profile."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])]
    out = []
    with profile(activities=activities) as prof:
        wall = timed(lambda: out.append(fn()))
    return out[0], wall, prof


def main() -> None:
    a = parse()
    from transformers import AutoModelForCausalLM

    from rlplugs.adapters.trl.packed_gqa import use_packed_gqa

    if a.model is None:
        from rlplugs.testing.smollm2 import smollm2_dir

        a.model = str(smollm2_dir())
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).to(a.device).train(a.train_mode)
    use_packed_gqa(model)
    if a.attention == "blocks":
        from block_decoding import use_block_decoding

        use_block_decoding(model)
    if a.attention == "span":
        from rlplugs.adapters.trl.span_gqa import use_span_gqa

        use_span_gqa(model)
    if a.accelerate:
        from accelerate import Accelerator

        model = Accelerator(mixed_precision="bf16", cpu=a.device == "cpu").prepare_model(model)
    ids = torch.randint(100, model.config.vocab_size - 100, (a.batch, a.prompt), device=a.device)
    mask = torch.ones_like(ids)
    if a.left_pad:
        pads = torch.randint(0, a.prompt // 2, (a.batch, 1), device=a.device)
        mask = (torch.arange(a.prompt, device=a.device) >= pads).long()
        ids = ids.masked_fill(mask == 0, model.config.pad_token_id or 0)
    result = {"model": a.model, "device": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else a.device,
              "batch": a.batch, "prompt": a.prompt, "cache": a.cache, "steps": a.steps, "torch": torch.__version__,
              "attention": a.attention, "train_mode": a.train_mode, "left_pad": a.left_pad, "accelerate": a.accelerate}  # fmt: skip
    result["first_call_s"] = round(timed(lambda: generate(model, ids, mask, a.steps, a.cache)), 2)  # compiles
    prefill = min(timed(lambda: generate(model, ids, mask, 1, a.cache)) for _ in range(2))
    whole = min(timed(lambda: generate(model, ids, mask, a.steps + 1, a.cache)) for _ in range(2))
    result["prefill_s"] = round(prefill, 3)
    result["ms_per_step"] = round((whole - prefill) / a.steps * 1000, 2)
    a.out.write_text(json.dumps(result, indent=2))
    _, wall, prof = profiled(lambda: generate(model, ids, mask, a.steps + 1, a.cache))
    result["profiled_wall_s"] = round(wall, 3)
    result.update(summarize(prof, wall, a.steps + 1, a.top))
    a.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
