"""What policy-gradient updates do to the tail top-p never draws, with and without the kept mask.

Session 31's kept-mask run (benchmarks/README.md) improved on its own top_p 0.9 rollouts while its
holdout at top_p 1.0 fell to 0. The reading: the full-vocabulary loss lowers every other token on a
positive advantage, the tail included, while the kept-set loss (``keep_sampling_mask``) reads only
the kept sets, so nothing but the shared weights moves the tail. This measures that on the CPU: it
samples factorio-build completions with their kept sets through the trainer's recorder, then from
the same start runs the same updates (the first-update GRPO gradient: every completion at advantage
+1, as when the off-policy mask leaves only positive rollouts, or half of each prompt's completions
at -1) once with the full log-softmax and once with
:func:`~rlplugs.adapters.trl.keep_sampling_mask.kept_set_logps`, and reports the probability mass
outside the start's kept sets on the trained completions and on completions of other prompts. The
prompt is encoded without gradient (its 1,113 tokens would make each CPU step minutes long), so
updates reach the weights through the completion positions only.

    python benchmarks/tail_drift.py --out benchmarks/results/tail_drift_smollm2.json
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import torch


def sample(model, tokenizer, rows, args) -> list[dict]:
    """Per prompt: its ids, ``samples`` completions, their kept sets and a mask up to the end token."""
    from kept_sets import sample_recorded  # beside this script

    groups = []
    for row in rows:
        text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        prompt = tokenizer(text, return_tensors="pt").input_ids
        out, kept = sample_recorded(model, tokenizer, {"input_ids": prompt}, args)
        completion = out[:, prompt.size(1) :]
        is_end = (completion == tokenizer.eos_token_id).long()
        mask = is_end.cumsum(1) - is_end == 0  # up to and with the end token
        groups.append({"prompt": prompt, "completion": completion, "kept": kept, "mask": mask})
    return groups


def hidden_states(model, group) -> torch.Tensor:
    """``(rows, C + 1, H)``: the last hidden states whose logits give the ``C`` completion tokens (the
    prompt encoded without gradient), and one trailing position, the layout ``kept_set_logps`` reads."""
    prompt, completion = group["prompt"], group["completion"]
    rows = completion.size(0)
    with torch.no_grad():
        cache = model.model(prompt[:, :-1], use_cache=True).past_key_values
    cache.batch_repeat_interleave(rows)
    inputs = torch.cat([prompt[:, -1:].expand(rows, 1), completion], dim=1)
    return model.model(inputs, past_key_values=cache, use_cache=True).last_hidden_state


def token_logps(model, group, kept_loss: bool, temperature: float) -> torch.Tensor:
    """Each completion token's log-probability as the trainer scores it: over its kept set, or over
    the whole vocabulary (TRL's own ``selective_log_softmax``)."""
    from trl.trainer.utils import selective_log_softmax

    from rlplugs.adapters.trl.keep_sampling_mask import kept_set_logps

    hidden = hidden_states(model, group)
    if kept_loss:
        return kept_set_logps(hidden, model.lm_head, group["completion"], group["kept"], temperature)
    return selective_log_softmax(model.lm_head(hidden[:, :-1]).float() / temperature, group["completion"])


@torch.no_grad()
def tail_mass(model, groups, temperatures: tuple[float, ...]) -> list[float]:
    """Per temperature, the mean over completion tokens of the probability outside the start's kept set."""
    totals, count = [0.0] * len(temperatures), 0
    for group in groups:
        logits = model.lm_head(hidden_states(model, group)[:, :-1]).float()
        for k, temperature in enumerate(temperatures):
            probs = (logits / temperature).softmax(-1)
            inside = torch.zeros_like(probs[..., 0])
            for r, entries in enumerate(group["kept"]):
                inside[r].index_add_(0, entries[:, 0], probs[r, entries[:, 0], entries[:, 1]])
            totals[k] += ((1 - inside).clamp_min(0) * group["mask"]).sum().item()
        count += group["mask"].sum().item()
    return [total / count for total in totals]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="policy dir, a model whose key-value cache can repeat its rows (Llama-style "
                   "attention, not Qwen3.5's linear attention; default: SmolLM2-135M-Instruct via rlplugs.testing.smollm2)")
    p.add_argument("--prompts", type=int, default=2, help="factorio-build train prompts the updates learn from")
    p.add_argument("--other_prompts", type=int, default=2, help="holdout prompts the tail is also measured on")
    p.add_argument("--samples", type=int, default=4, help="completions per prompt (even: 'mixed' makes half negative)")
    p.add_argument("--tokens", type=int, default=64, help="new tokens per completion")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top_p", type=float, default=0.9)
    p.add_argument("--eval_temperature", type=float, default=0.6, help="the protocol's temperature (top_p 1.0)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.samples % 2:
        p.error(f"--samples {args.samples}: give an even number, half of each prompt's completions are negatives in 'mixed'")

    from kept_sets import load_policy  # beside this script (python benchmarks/tail_drift.py)

    from rlplugs.registry import make_env

    torch.manual_seed(args.seed)
    name, tokenizer, start_model = load_policy(args.model)
    env = make_env("factorio-build", {})
    train = sample(start_model, tokenizer, [env.dataset("train")[i] for i in range(args.prompts)], args)
    other = sample(start_model, tokenizer, [env.dataset("holdout")[i] for i in range(args.other_prompts)], args)

    def measure(model) -> dict:
        temperatures = (args.temperature, args.eval_temperature)
        return {f"{where}_T{t}": round(mass, 6) for where, groups in (("trained", train), ("other", other))
                for t, mass in zip(temperatures, tail_mass(model, groups, temperatures))}  # fmt: skip

    # advantages per completion: all +1, or the first half of each prompt's completions at -1
    half = args.samples // 2
    advantages = {"positive": torch.ones(args.samples), "mixed": torch.tensor([-1.0, 1.0]).repeat_interleave(half)}
    arms = {"start": {"tail_mass": measure(start_model)}}
    for setting, advantage in advantages.items():
        for loss_name, kept_loss in (("full_vocabulary", False), ("kept_sets", True)):
            model = copy.deepcopy(start_model).train()
            optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
            losses, begun = [], time.perf_counter()
            for _ in range(args.steps):
                optimizer.zero_grad()
                sums = [(token_logps(model, g, kept_loss, args.temperature) * g["mask"]).sum(1) for g in train]
                weighted = [completion_sums @ advantage for completion_sums in sums]
                loss = -sum(weighted) / sum(g["mask"].sum() for g in train)
                loss.backward()
                optimizer.step()
                losses.append(round(loss.item(), 5))
            arm = f"{setting}/{loss_name}"
            arms[arm] = {"loss_per_step": losses, "wall_s": round(time.perf_counter() - begun, 1),
                         "tail_mass": measure(model.eval())}  # fmt: skip
            print(arm, json.dumps(arms[arm]), flush=True)
    ratios = {f"{setting}/{key}": round(arms[f"{setting}/kept_sets"]["tail_mass"][key]
                                        / arms[f"{setting}/full_vocabulary"]["tail_mass"][key], 4)
              for setting in advantages for key in arms["start"]["tail_mass"]}  # fmt: skip
    result = {
        "what": "probability mass outside the start's top-p kept sets after policy-gradient updates (all "
                "advantages +1, or half of each prompt's completions at -1), full-vocabulary loss vs kept-set loss, "
                "from one start on the same completions",
        "model": name, "prompts": args.prompts, "other_prompts": args.other_prompts, "samples": args.samples,
        "tokens": args.tokens, "temperature": args.temperature, "top_p": args.top_p,
        "eval_temperature": args.eval_temperature, "steps": args.steps, "lr": args.lr, "seed": args.seed,
        "arms": arms, "ratio_kept_over_full": ratios,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, CPU",
        "command": shlex.join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
    }  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"start": arms["start"], "ratio_kept_over_full": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
