"""How large the kept sets of ``keep_sampling_mask`` are: the tokens top-p leaves drawable per step.

The trainer rescores each token over its kept set, reading one output-embedding row per kept token,
and the generation batch carries the sets until the update; ``top_k`` bounds them. This samples
factorio-build completions from a policy through the same recorder the trainer uses
(:class:`rlplugs.adapters.trl.sampling_logprobs.RecordedGenerate`, no ``top_k``) and reports the
set sizes, so a run's ``top_k`` can be chosen where it does not cut the nucleus.

    python benchmarks/kept_sets.py --out benchmarks/results/kept_sets_smollm2.json
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import torch


def load_policy(model_dir: str | None) -> tuple[str, object, torch.nn.Module]:
    """Its name, tokenizer and float32 model in eval mode: ``model_dir``, or SmolLM2-135M-Instruct."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = model_dir or "SmolLM2-135M-Instruct (rlplugs.testing.smollm2)"
    if model_dir is None:
        from rlplugs.testing.smollm2 import smollm2_dir

        model_dir = str(smollm2_dir())
    return name, AutoTokenizer.from_pretrained(model_dir), AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def sample_recorded(model, tokenizer, inputs, args) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``args.samples`` completions of each prompt in ``inputs`` (the prompt ids included) at
    ``args.temperature`` and ``args.top_p``, no ``top_k``, and the kept sets of every step, as the
    trainer's recorder keeps them."""
    from transformers import GenerationConfig

    from rlplugs.adapters.trl.sampling_logprobs import RecordedGenerate

    config = GenerationConfig(do_sample=True, max_new_tokens=args.tokens, temperature=args.temperature, top_p=args.top_p,
                              top_k=None, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    with RecordedGenerate(model, args.temperature, top_p=args.top_p, keep_sets=True) as recorded:
        out = model.generate(**inputs, generation_config=config, num_return_sequences=args.samples)
    return out, recorded.recorder.kept


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="policy dir (default: SmolLM2-135M-Instruct via rlplugs.testing.smollm2)")
    p.add_argument("--prompts", type=int, default=2, help="factorio-build train prompts")
    p.add_argument("--samples", type=int, default=4, help="completions per prompt")
    p.add_argument("--tokens", type=int, default=96, help="new tokens per completion")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top_p", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    from rlplugs.registry import make_env

    torch.manual_seed(args.seed)
    name, tokenizer, model = load_policy(args.model)
    rows = make_env("factorio-build", {}).dataset("train")
    texts = [tokenizer.apply_chat_template(rows[i]["prompt"], add_generation_prompt=True, tokenize=False) for i in range(args.prompts)]
    batch = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
    start = time.perf_counter()
    _, kept = sample_recorded(model, tokenizer, batch, args)
    wall = time.perf_counter() - start
    sizes = torch.cat([torch.bincount(sets[:, 0]) for sets in kept]).float()
    result = {
        "what": "kept-set sizes (tokens top-p leaves drawable per step) of factorio-build completions",
        "model": name, "prompts": args.prompts, "samples": args.samples, "tokens": args.tokens,
        "temperature": args.temperature, "top_p": args.top_p, "positions": len(sizes),
        "median": sizes.median().item(), "mean": round(sizes.mean().item(), 2),
        **{f"p{q}": round(sizes.quantile(q / 100).item(), 1) for q in (90, 99)}, "max": sizes.max().item(),
        "share_of_one": round((sizes == 1).float().mean().item(), 4),
        **{f"share_above_{k}": round((sizes > k).float().mean().item(), 4) for k in (64, 512)},
        "wall_s": round(wall, 1), "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, CPU",
        "command": shlex.join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
    }  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
