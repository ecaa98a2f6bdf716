"""Generation speed inside the real GRPO step, the generation backends side by side in one run.

Each mode trains ``EnvGRPOTrainer`` for ``--steps`` steps exactly as ``rlplugs grpo`` builds it,
and times what the step spends generating (every call of TRL's ``_generate_single_turn``, CUDA
synchronised) and the whole step:

- ``plain``: TRL's ``generate`` with transformers' dynamic cache (TRL's default without vLLM);
- ``compiled``: ``compile_generation`` (static cache, compiled decoding step, prompts bucketed by
  ``pad_to_multiple_of``) with the decoding attention it picks: on CUDA span GQA, a Triton kernel
  that reads only each live row's attended span of the cache; its first step includes the
  compile, later steps show whether it recurs;
- ``packed``: ``compiled`` with packed GQA instead, which reads the whole cache (what
  ``compile_generation`` ran on CUDA before span GQA);
- ``blocks``: ``compiled`` with the experimental decoding attention that reads only the filled
  cache blocks of rows still decoding (``block_decoding.py``, FlexAttention);
- ``continuous``: ``use_transformers_continuous_batching``.

A mode may name a larger generation batch after ``@`` (``compiled@256``): TRL then generates that
many completions at once and trains on them in micro-batches of ``--completions``
(``gradient_accumulation_steps``, one optimizer step per generation, so still on-policy). Such a
step holds more completions, so the step times are compared per ``--completions`` completions.

factorio-build is single-turn (``--completions`` programs per step in groups of
``--num_generations``, the env's real prompts); ``--multi_turn`` adds a clembench-games step (its
episodes' rounds through the same backends). vLLM cannot run on the benchmark machine (it pins
another torch), so it is not among the modes.

    python benchmarks/generation.py --out benchmarks/results/generation.json --key h200
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

MODES = ("plain", "compiled", "continuous")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model directory (default: the SmolLM2-135M-Instruct fixture)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated; MODE@N generates N completions at once")
    p.add_argument("--multi_turn_modes", default="", help="modes for the clembench-games step (empty: none)")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--completions", type=int, default=64)
    p.add_argument("--num_generations", type=int, default=8)
    p.add_argument("--max_completion_length", type=int, default=2048)
    p.add_argument("--turn_tokens", type=int, default=300, help="multi-turn: per-turn cap")
    p.add_argument("--workers", type=int, default=8, help="factorio sandbox workers")
    p.add_argument("--out", default="benchmarks/results/generation.json")
    p.add_argument("--key", default=None, help="store under this key of --out, keeping the file's other keys")
    p.add_argument("--profile_step", type=int, default=None,
                   help="profile the generation calls of this step (0-based) with torch.profiler, summarised as "
                        "decode_profile.py summarises its steps, under each mode's 'profile'")
    return p.parse_args()


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class GenerationMeter:
    """Times every generation call of a trainer and the steps around them."""

    def __init__(self, trainer, profile_step: int | None = None):
        from transformers import TrainerCallback

        self.profiles: list[dict] = []
        self.calls: list[dict] = []
        self.steps: list[float] = []
        self.trainer = trainer
        meter, generate = self, trainer._generate_single_turn

        def timed(prompt_ids, *args, **kwargs):
            if trainer.state.global_step == profile_step:
                return profiled_call(prompt_ids, *args, **kwargs)
            synchronize()
            start = time.perf_counter()
            ids, logprobs = generate(prompt_ids, *args, **kwargs)
            synchronize()
            meter.calls.append({"step": trainer.state.global_step, "seconds": time.perf_counter() - start,
                                "rows": len(ids), "tokens": sum(len(x) for x in ids)})  # fmt: skip
            return ids, logprobs

        def profiled_call(prompt_ids, *args, **kwargs):
            """One generation call under the profiler, per decoding step (its longest completion's
            length); its time is not counted among the timed calls."""
            from decode_profile import profiled, summarize  # beside this script

            (ids, logprobs), wall, prof = profiled(lambda: generate(prompt_ids, *args, **kwargs))
            steps = max(len(x) for x in ids)
            meter.profiles.append({"step": trainer.state.global_step, "rows": len(ids), "decoding_steps": steps,
                                   "wall_s": round(wall, 3), "ms_per_step": round(wall / steps * 1000, 2),
                                   **summarize(prof, wall, steps, 15)})  # fmt: skip
            return ids, logprobs

        class StepClock(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                synchronize()
                self.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                synchronize()
                meter.steps.append(time.perf_counter() - self.start)

        trainer._generate_single_turn = timed
        trainer.add_callback(StepClock())

    def per_step(self) -> list[dict]:
        """Per step: multi-turn tokens are the rollout's own count of real rounds (the fillers that
        keep a round's width are generated but not counted); single-turn, every generated token."""
        rollout_tokens = {h["step"] - 1: h["rollout/generated_tokens"] for h in self.trainer.state.log_history
                          if "rollout/generated_tokens" in h}  # fmt: skip
        out = []
        for step, seconds in enumerate(self.steps):
            calls = [c for c in self.calls if c["step"] == step]
            gen = sum(c["seconds"] for c in calls)
            tokens = int(rollout_tokens.get(step, sum(c["tokens"] for c in calls)))
            out.append({"step_s": round(seconds, 2), "generation_s": round(gen, 2), "generated_tokens": tokens,
                        "calls": len(calls), "tok_per_s": round(tokens / gen, 1) if gen else None})  # fmt: skip
        return out


def generation_batch(a, mode: str) -> int:
    """Completions generated at once in ``mode`` (``compiled@256``: 256; plain names: ``--completions``)."""
    size = int(mode.partition("@")[2] or a.completions)
    if size % a.completions:
        raise SystemExit(f"mode {mode}: the generation batch must be a multiple of --completions ({a.completions})")
    return size


def run_mode(a, env: str, env_args: dict, mode: str, multi_turn: bool) -> dict:
    import torch
    import torch._dynamo.utils as dynamo_utils
    from trl import GRPOConfig

    from rlplugs.adapters.trl.rewards import EnvRewardFunctions
    from rlplugs.adapters.trl.rollout import make_episode_rollout
    from rlplugs.adapters.trl.trainer import EnvGRPOTrainer
    from rlplugs.registry import make_env

    spec = make_env(env, env_args)
    rewards = EnvRewardFunctions(spec)
    backend, batch = mode.partition("@")[0], generation_batch(a, mode)
    generation_kwargs = {"max_new_tokens": a.turn_tokens} if multi_turn else None
    cuda = torch.cuda.is_available()  # elsewhere only a smoke run of this script: fp32 on the CPU
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix=f"gen-{mode}-"), bf16=cuda, use_cpu=not cuda,
        model_init_kwargs={"dtype": "bfloat16" if cuda else "float32"},
        per_device_train_batch_size=a.completions, gradient_accumulation_steps=batch // a.completions,
        num_generations=a.num_generations,
        max_completion_length=a.max_completion_length, generation_kwargs=generation_kwargs, temperature=0.7,
        beta=0.0, learning_rate=1e-6, max_steps=a.steps, logging_steps=1, save_strategy="no", report_to="none",
        gradient_checkpointing=True, use_transformers_continuous_batching=backend == "continuous", seed=0,
        reward_weights=rewards.weights,
    )  # fmt: skip
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    graphs_before = dynamo_utils.counters["stats"]["unique_graphs"]
    trainer = EnvGRPOTrainer(
        model=a.model, reward_funcs=rewards.functions, args=args, train_dataset=spec.dataset("train"),
        rollout_func=make_episode_rollout(spec) if spec.multi_turn else None, compile_generation=backend in ("compiled", "packed", "blocks"),
    )  # fmt: skip
    # the weights are bf16 on the GPU: generation decodes on this model
    if backend == "packed":
        from rlplugs.adapters.trl.packed_gqa import use_packed_gqa

        use_packed_gqa(trainer.model)
    if backend == "blocks":
        from block_decoding import use_block_decoding

        use_block_decoding(trainer.model)
    meter = GenerationMeter(trainer, a.profile_step)
    trainer.train()
    steps = [s for i, s in enumerate(meter.per_step()) if i != a.profile_step]  # a profiled step is not timed
    later = steps[1:] or steps
    result = {
        "steps": steps,
        "generation_batch": batch,
        "median_later_step_s": statistics.median(s["step_s"] for s in later),
        "median_later_step_s_per_completions": round(statistics.median(s["step_s"] for s in later) * a.completions / batch, 2),
        "median_later_generation_s": statistics.median(s["generation_s"] for s in later),
        "median_later_tok_per_s": statistics.median(s["tok_per_s"] for s in later),
        "first_step_extra_s": round(steps[0]["step_s"] - statistics.median(s["step_s"] for s in later), 1),
        "compiled_graphs": dynamo_utils.counters["stats"]["unique_graphs"] - graphs_before,
        "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1) if cuda else None,
        "mean_reward": next((h["reward"] for h in reversed(trainer.state.log_history) if "reward" in h), None),
        **({"profile": meter.profiles} if meter.profiles else {}),
    }
    print(mode, "multi-turn" if multi_turn else "", result, flush=True)
    del trainer
    if cuda:
        torch.cuda.empty_cache()
    return result


def main() -> None:
    a = parse()
    load = os.getloadavg()[0]
    if a.model is None:
        from rlplugs.testing.smollm2 import smollm2_dir

        a.model = str(smollm2_dir())
    modes = [m for m in f"{a.modes},{a.multi_turn_modes}".split(",") if m]
    rows = max(generation_batch(a, m) for m in modes or ["plain"]) // a.num_generations
    factorio_args = {"rows": max(rows * a.steps, 8), "eval_rows": 1, "workers": a.workers}
    results: dict = {"factorio-build": {}, "model": Path(a.model).name, "settings": {
        "completions_per_step": a.completions, "num_generations": a.num_generations,
        "max_completion_length": a.max_completion_length, "temperature": 0.7, "dtype": "bfloat16",
        "step_s_per_completions": f"step time x {a.completions} / generation batch"}}  # fmt: skip
    sys.path.insert(0, str(Path(__file__).parent))
    from result_file import write_result

    def save(unfinished: list[str]) -> None:
        """Write what has run so far: a run cut off (a device lease ending) keeps its finished modes."""
        for env in ("factorio-build", "clembench-games"):
            done = results.get(env, {})
            if "plain" in done:
                base = done["plain"]
                results.setdefault("ratios_vs_plain", {})[env] = {
                    m: {"tok_per_s": round(r["median_later_tok_per_s"] / base["median_later_tok_per_s"], 2),
                        f"step_time_per_{a.completions}_completions_shorter": round(base["median_later_step_s_per_completions"]
                                                   / r["median_later_step_s_per_completions"], 2)}
                    for m, r in done.items() if isinstance(r, dict) and "steps" in r and m != "plain"
                }  # fmt: skip
        results["unfinished_modes"] = unfinished
        write_result(a.out, results, load, key=a.key, shared=False)

    games = {"games": ["wordle"], "seats": "single", "train_per_experiment": rows * a.steps}
    runs = [("factorio-build", factorio_args, m, False) for m in a.modes.split(",") if m]
    runs += [("clembench-games", games, m, True) for m in a.multi_turn_modes.split(",") if m]
    for i, (env, env_args, mode, multi_turn) in enumerate(runs):
        if multi_turn:
            results.setdefault(env, {"turn_tokens": a.turn_tokens, "env_args": games})
        results[env][mode] = run_mode(a, env, env_args, mode, multi_turn=multi_turn)
        save([f"{e}:{m}" for e, _, m, _ in runs[i + 1 :]])
    if not runs:
        save([])


if __name__ == "__main__":
    main()
