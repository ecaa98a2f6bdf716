"""Reproduce the factorio-build table *in kind*: base -> SFT warm start -> GRPO, plus plugin overhead.

The first model card reports (Qwen3.5-9B, holdout): base 1.6%, SFT on 93 programs 18.0%, +20 GRPO
steps 79.5%; SFT on 800 programs 57.4%, +20 GRPO steps 84.0%. This script runs the same stages
through rlplugs' own plugins only (``rlplugs sft --env factorio-build``, ``rlplugs grpo --env
factorio-build``, ``trl grpo --env factorio-build`` for the overhead figure, and the generic
``evaluate`` API with the card's protocol) on a real pretrained model that runs offline,
SmolLM2-135M-Instruct (``rlplugs.testing.smollm2``), at a scale one GPU-lease can afford.

Stages (``--stages``, comma-separated; each writes ``OUT/<stage>.json`` as soon as it ends, so a
run split over several calls, or cut short, keeps what finished):

- ``base``: evaluate the base model on validation and holdout;
- ``sft93`` / ``sft800``: SFT on the warm-start set, then evaluate; ``sft1200``: SFT on the
  diverse set ``warmstart-diverse-1200`` (the 800 set plus 400 programs of other builders and
  rewrites, ``factorio_build.diverse``), not part of the default stages;
- ``grpo93`` / ``grpo800`` / ``grpo1200``: GRPO from that SFT checkpoint, then evaluate; keeps
  reward per step and the run's segments (``--fixups segments``). With ``--grpo_continue`` a done
  GRPO stage trains on from its last checkpoint to a larger ``--grpo_steps`` (on the machine that
  holds the checkpoint: a GRPO checkpoint is too large to travel with a device call);
- ``overhead``: median step time of ``trl grpo --env factorio-build`` vs a hand-written TRL script
  (``benchmarks/factorio_grpo_handwritten.py``) with the same model, data, reward and settings.

``--collect`` assembles the stage files into ``benchmarks/results/<--result>.json`` and a PNG
of reward per GRPO step (a GRPO run, first or continued, that a lost lease cut short before its
evaluation and stage file: from its log, under ``cut_short``); the evaluations themselves are
compared by ``rlplugs report`` (one table and picture with row-bootstrap intervals,
``benchmarks/results/<--result>_evals.{json,png}``). The exact commands used are in
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from logged_command import rlplugs_cli, run_logged  # beside this script (python benchmarks/factorio_repro.py)

log = logging.getLogger("factorio_repro")
ENV = "factorio-build"
CARD = {  # Qwen3.5-9B, from the model card (holdout, and validation where given)
    "base": {"holdout": 0.016, "validation": 0.021},
    "sft93": {"holdout": 0.180},
    "grpo93": {"holdout": 0.795},
    "sft800": {"holdout": 0.574},
    "grpo800": {"holdout": 0.840, "validation": 0.859},
}
DIVERSE_STAGES = ("sft1200", "grpo1200")  # no card figure: the card trained on its 800 set only


def warmstart_set(size: int) -> str:
    """The SFT dataset a stage size names: the card's template sets, else the diverse set."""
    return f"warmstart-{size}" if size in (93, 800) else f"warmstart-diverse-{size}"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stages", default="base,sft93,grpo93,sft800,grpo800,overhead")
    p.add_argument("--out", type=Path, default=Path("runs/factorio_repro"))
    p.add_argument("--model", default=None, help="base model dir (default: SmolLM2-135M-Instruct via rlplugs.testing.smollm2)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--eval_rows", type=int, default=16)
    p.add_argument("--eval_samples", type=int, default=4)
    p.add_argument("--eval_splits", default="validation,holdout", help="comma-separated splits each evaluation scores")
    p.add_argument("--max_new_tokens", type=int, default=3072, help="completion limit in eval and GRPO")
    p.add_argument("--sft_epochs", type=float, default=3.0)
    p.add_argument("--sft_lr", type=float, default=1e-4)
    p.add_argument("--grpo_steps", type=int, default=None, help="GRPO optimizer steps (default 4, 1 with --cpu)")
    p.add_argument("--grpo_prompts_per_step", type=int, default=4, help="groups per step (16 rollouts each)")
    p.add_argument("--grpo_lr", type=float, default=1e-5)
    p.add_argument("--grpo_generation_batch", type=int, default=None,
                   help="completions generated at once (TRL's generation_batch_size; default: one step's, on-policy); "
                        "a multiple of a step's completions serves that many optimizer steps from one generation")
    p.add_argument("--compile_generation", action="store_true",
                   help="GRPO (its compile_generation) and the evaluations (HFPolicy's) generate with compiled decoding")
    p.add_argument("--grpo_mask_truncated", action="store_true",
                   help="leave rollouts that hit the cap out of the loss (TRL's mask_truncated_completions): a program "
                        "that never closes scores below its group and would push down the prefix it shares with winners")
    p.add_argument("--grpo_eval_every", type=int, default=0,
                   help="also evaluate the GRPO checkpoints every N steps (stages grpoNN-stepK), beside the last")
    p.add_argument("--grpo_continue", action="store_true",
                   help="a GRPO stage already done with fewer steps than --grpo_steps continues from its last "
                        "checkpoint up to --grpo_steps (TRL resume: weights, optimizer, data order) instead of "
                        "being skipped; its earlier last step becomes a checkpoint row, and the stage records both "
                        "segments. The first continued step runs at the rate the optimizer ended with (0 after a "
                        "linear decay), then the schedule is rebuilt for the new total: plan such a chain with "
                        "--grpo_args \"--lr_scheduler_type constant\"")
    p.add_argument("--grpo_args", default="",
                   help="further `rlplugs grpo` (TRL GRPOConfig) flags for the GRPO stages, one string, e.g. "
                        "\"--scale_rewards batch --max_grad_norm 0.5\"; TRL refuses unknown ones")
    p.add_argument("--overhead_steps", type=int, default=6)
    p.add_argument("--overhead_tokens", type=int, default=256)
    p.add_argument("--workers", type=int, default=8, help="factory-sim sandbox workers")
    p.add_argument("--cpu", action="store_true", help="plumbing check on CPU (tiny settings)")
    p.add_argument("--collect", action="store_true", help="assemble OUT/*.json into benchmarks/results")
    p.add_argument("--result", default="factorio_repro", help="--collect's file name in benchmarks/results (.json, .png, _evals)")
    return p.parse_args()


def env_args(a) -> str:
    return json.dumps(env_options(a))


def env_options(a) -> dict:
    """The environment's options: its evaluation splits hold ``--eval_rows`` rows (16 by default)."""
    return {"workers": a.workers, "eval_rows": a.eval_rows}


def precision(a) -> list[str]:
    return ["--use_cpu", "true", "--bf16", "false"] if a.cpu else ["--bf16", "true"]


def evaluate_model(a, model_dir: str, stage: str) -> dict:
    """The card's protocol (16 rows x 4 samples, T=0.6, thinking off) on the ``--eval_splits``."""
    import torch

    from rlplugs.tools.evaluation import at_cap_share, evaluate_to_dir, protocol_overrides
    from rlplugs.tools.policies import HFPolicy
    from rlplugs.registry import make_env

    spec = make_env(ENV, env_options(a))
    protocol = protocol_overrides(spec.eval, rows=a.eval_rows, samples_per_row=a.eval_samples,
                                  max_new_tokens=a.max_new_tokens, splits=a.eval_splits.split(","))  # fmt: skip
    policy = HFPolicy(
        model_dir,
        temperature=protocol.temperature,
        max_new_tokens=protocol.max_new_tokens,
        enable_thinking=protocol.enable_thinking,
        batch_size=protocol.rows * protocol.samples_per_row,
        device=None if a.cpu else a.device,
        compile_generation=a.compile_generation,
        dtype="auto" if a.cpu else "bfloat16",  # as the GRPO trainer generates (its bf16 copy)
    )
    report, _ = evaluate_to_dir(spec, protocol.splits, policy, a.out / f"eval-{stage}", protocol=protocol, policy_name=stage, render=1)
    del policy  # the static cache's memory goes back before the next stage's trainer starts
    torch.cuda.empty_cache()
    return {
        split: {
            "success": report["splits"][split]["success_rate"],
            "validity": report["splits"][split]["components"].get("validity"),
            "wall_s": report["splits"][split]["wall_time_s"],
            "at_cap": at_cap_share(report["splits"][split]),  # cut off at max_new_tokens
        }
        for split in protocol.splits
    }


def sft(a, base: str, size: int) -> tuple[str, float]:
    out = a.out / f"sft{size}"
    cmd = rlplugs_cli("sft", "--env", ENV, "--env_args", env_args(a), "--sft_dataset", warmstart_set(size),
           "--model_name_or_path", base, "--output_dir", str(out), "--num_train_epochs", str(a.sft_epochs),
           "--learning_rate", str(a.sft_lr), "--lr_scheduler_type", "cosine", "--warmup_steps", "0.05",
           "--per_device_train_batch_size", "8", "--max_length", str(1300 + a.max_new_tokens),
           "--gradient_checkpointing", "false", "--logging_steps", "5", "--save_strategy", "no",
           "--report_to", "none", *precision(a))  # fmt: skip
    if a.cpu:
        cmd += ["--max_steps", "1", "--per_device_train_batch_size", "1", "--max_length", "256"]
    return str(out), run_logged(cmd, a.out / f"sft{size}.log", "rlplugs sft")


def grpo_args(a, model: str, out: Path, steps: int, tokens: int) -> list[str]:
    group = 2 if a.cpu else 16  # one group per micro-batch
    prompts = 1 if a.cpu else a.grpo_prompts_per_step
    return ["--env", ENV, "--env_args", env_args(a), "--model_name_or_path", model, "--output_dir", str(out),
            "--max_steps", str(steps), "--num_generations", str(group), "--per_device_train_batch_size", str(group),
            "--gradient_accumulation_steps", str(prompts), "--temperature", "0.7", "--beta", "0.0",
            "--learning_rate", str(a.grpo_lr), "--max_completion_length", str(tokens), "--logging_steps", "1",
            "--save_strategy", "steps", "--save_steps", str(steps),  # the last step's checkpoint: --grpo_continue resumes it
            "--report_to", "none", "--gradient_checkpointing", "true", *precision(a)]  # fmt: skip


UNRECORDED = ("stages", "out", "workers", "collect", "result")  # driver flags that say nothing about a stage's training
UPDATE_KEYS = ("step", "loss", "grad_norm", "entropy", "clip_ratio/region_mean", "learning_rate",  # every optimizer step
               "step_time",  # its wall seconds (a generation batch's first step: with the generation and scoring)
               "off_policy_mask/dropped_frac", "off_policy_mask/dropped_of_negative",  # with --off_policy_mask_threshold
               *(f"off_policy_mask/dropped_of_negative_at_{times}x" for times in (2, 4, 8)))
CURVE_KEYS = ("step", "reward", "reward_std", "rewards/success/mean", "rewards/validity/mean", "frac_reward_zero_std",
              "zero_spread/filtered_frac", "completions/mean_length", "completions/clipped_ratio", "step_time", "loss",
              "sampling/logp_gap/mean", "sampling/logp_gap/max")  # first step of a generation batch; the gap: with
# --grpo_args "--sampling_logprobs true"


def log_history(out: Path) -> list[dict]:
    """A run's step log: beside its final model (rlplugs' runs write it there), else in its last
    checkpoint (the hand-written overhead baseline saves only that)."""
    state = out / "trainer_state.json"
    if state.exists():
        return json.loads(state.read_text())["log_history"]
    ckpts = sorted(out.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[-1]))
    return json.loads(ckpts[-1].read_text())["log_history"] if ckpts else []


def grpo_steps(a) -> int:
    return a.grpo_steps or (1 if a.cpu else 4)


def grpo(a, model: str, size: int, resume_step: int = 0) -> tuple[str, float, list[dict], list[dict], int]:
    """``rlplugs grpo`` from ``model``, or on from its own checkpoint at ``resume_step`` (its output in a
    log of its own), with its segments recorded."""
    out = a.out / f"grpo{size}"
    steps = grpo_steps(a)
    tokens = 32 if a.cpu else a.max_new_tokens
    cmd = rlplugs_cli("grpo", *grpo_args(a, model, out, steps, tokens), "--filter_zero_spread_groups", "true",
                      "--fixups", "segments")  # fmt: skip
    if resume_step:
        cmd += ["--resume_from_checkpoint", str(out / f"checkpoint-{resume_step}")]
    if a.grpo_generation_batch:
        cmd += ["--generation_batch_size", str(a.grpo_generation_batch)]
    if a.compile_generation:
        cmd += ["--compile_generation", "true"]
    if a.grpo_mask_truncated:
        cmd += ["--mask_truncated_completions", "true"]
    if a.grpo_eval_every:
        cmd += ["--save_steps", str(a.grpo_eval_every)]  # replaces the one checkpoint at the last step
    cmd += shlex.split(a.grpo_args)
    wall = run_logged(cmd, a.out / (f"grpo{size}-from{resume_step}.log" if resume_step else f"grpo{size}.log"), "rlplugs grpo")
    history = log_history(out)
    # one per generation batch; a metric logged as None (nothing measured: an update with no token in
    # the loss) is left out, as the log reader leaves it out
    curve = [{k: h[k] for k in CURVE_KEYS if h.get(k) is not None} for h in history if "reward" in h]
    updates = [{k: h[k] for k in UPDATE_KEYS if h.get(k) is not None} for h in history if "grad_norm" in h]
    return str(out), wall, curve, updates, max((h.get("step", 0) for h in history), default=0)


def logged_steps(path: Path) -> list[dict]:
    """The metric dicts TRL printed to a GRPO stage's log, one per optimizer step, in order and
    numbered: what is known of a stage whose stage file predates ``updates``, or that a lost lease
    cut short before it wrote one."""
    import ast

    found = []
    for text in re.findall(r"\{'loss'.*?\}", path.read_text() if path.exists() else ""):
        logged = ast.literal_eval(text)
        if "grad_norm" in logged:
            found.append({**logged, "step": len(found) + 1})
    return found


def numbers(record: dict, keys: tuple[str, ...]) -> dict:
    """``keys`` of a printed metric dict (TRL prints its figures as text) as numbers."""
    return {k: float(record[k]) if k != "step" else record[k] for k in keys if record.get(k) is not None}


def from_log(path: Path) -> tuple[list[dict], list[dict]]:
    """A GRPO stage's curve (one record per generation batch) and updates, read once from its log."""
    steps = logged_steps(path)
    return [numbers(m, CURVE_KEYS) for m in steps if "reward" in m], [numbers(m, UPDATE_KEYS) for m in steps]


def overhead(a, model: str) -> dict:
    """Median step time, plugin path vs hand-written script, same settings, in one run."""
    from rlplugs.adapters.trl.launch import with_cpu_threads

    steps = 2 if a.cpu else a.overhead_steps
    tokens = 16 if a.cpu else a.overhead_tokens
    result = {}
    for name, cmd in {
        "trl_grpo_env": ["trl", "grpo"],
        # launched like TRL launches its own scripts and with the launch settings `trl grpo --env`
        # adds (the process settings, OMP_NUM_THREADS, ... move step times more than the 2% tested)
        "handwritten": [sys.executable, "-m", "accelerate.commands.launch", *with_cpu_threads([]),
                        str(Path(__file__).with_name("factorio_grpo_handwritten.py"))],
    }.items():
        out = a.out / f"overhead-{name}"
        run_logged([*cmd, *grpo_args(a, model, out, steps, tokens), "--skip_preflight", "true"], a.out / f"overhead-{name}.log", f"the {name} GRPO run")
        times = [h["step_time"] for h in log_history(out) if "step_time" in h]
        if not times:
            raise RuntimeError(f"{name}: no step_time in the trainer state under {out}")
        result[name] = {"step_times_s": times, "median_s": statistics.median(times[1:] or times)}
    result["grpo_overhead_ratio"] = result["trl_grpo_env"]["median_s"] / result["handwritten"]["median_s"]
    return result


def continues(a, name: str, earlier: dict) -> bool:
    """Whether ``--grpo_continue`` trains the done GRPO stage ``name`` on to ``--grpo_steps``."""
    if not (a.grpo_continue and name.startswith("grpo") and grpo_steps(a) > earlier.get("steps", 0)):
        return False
    from rlplugs.builtins.checkpoint.segments import GUARD_STOP

    ended = (earlier.get("segments") or [{}])[-1].get("end_reason") or ""
    if ended.startswith(GUARD_STOP):  # e.g. entropy-guard: the policy broke, nothing worth training on
        raise SystemExit(f"{name}: not continued: its run {ended}; remove {a.out / f'{name}.json'} to train the stage "
                         "again from its SFT start")
    checkpoint = a.out / name / f"checkpoint-{earlier['steps']}"
    if not (checkpoint / "trainer_state.json").exists():
        raise SystemExit(f"{name}: cannot continue from step {earlier['steps']}: {checkpoint} is missing or incomplete; "
                         f"remove {a.out / f'{name}.json'} to train the stage from its SFT start")
    return True


def base_model(a) -> str:
    if a.model:
        return a.model
    from rlplugs.testing.smollm2 import smollm2_dir

    return str(smollm2_dir())


def stage(a, name: str, earlier: dict | None = None) -> dict:
    """Run stage ``name``; ``earlier``: the GRPO stage's own result, to continue (``--grpo_continue``)."""
    base = base_model(a)
    if name == "base":
        return {"model": base, "eval": evaluate_model(a, base, name)}
    size = int(name.removeprefix("sft").removeprefix("grpo")) if name != "overhead" else None
    if name.startswith("sft"):
        out, wall = sft(a, base, size)
        return {"model": out, "train_wall_s": wall, "eval": evaluate_model(a, out, name)}
    if name.startswith("grpo"):
        from rlplugs.builtins.checkpoint.segments import SegmentLog

        done = earlier["steps"] if earlier else 0
        out, wall, curve, updates, steps = grpo(a, str(a.out / f"sft{size}"), size, done)
        checkpoints = dict(earlier.get("checkpoint_evals", {})) if earlier else {}
        if earlier:  # the earlier last step is now a checkpoint: its evaluation (and folder) keep their step
            kept = a.out / f"eval-{name}-step{done}"
            if not kept.exists():  # (an attempt cut short after the rename did it already)
                (a.out / f"eval-{name}").rename(kept)
            checkpoints[f"{name}-step{done}"] = {"steps": done, "eval": earlier["eval"]}
        every = a.grpo_eval_every or steps
        for k in range(every, steps, every):  # the last step's checkpoint is `out` itself
            if k > done:
                checkpoints[f"{name}-step{k}"] = {"steps": k, "eval": evaluate_model(a, f"{out}/checkpoint-{k}", f"{name}-step{k}")}
        return {"model": out, "train_wall_s": wall + (earlier["train_wall_s"] if earlier else 0.0), "steps": steps,
                "curve": curve, "updates": updates, "checkpoint_evals": checkpoints,
                "segments": [asdict(s) for s in SegmentLog(out).segments], "eval": evaluate_model(a, out, name)}  # fmt: skip
    if name == "overhead":
        return overhead(a, base)
    raise ValueError(f"unknown stage {name!r}")


def stage_commands(out: Path) -> list[str]:
    """The training commands exactly as the driver logged them (``$ ...`` lines of the chain logs)."""
    found = []
    for chain in sorted(out.glob("chain_*.log")):
        found += [line.split(" $ ", 1)[1].strip() for line in chain.read_text().splitlines() if " $ " in line]
    return list(dict.fromkeys(found))  # a retried stage logs its command again


def collect(a) -> None:
    import matplotlib

    matplotlib.use("Agg")
    stages = {p.stem: json.loads(p.read_text()) for p in sorted(a.out.glob("*.json"))}
    meta = stages.pop("meta", {})
    cut_short = cut_short_runs(a.out, stages)
    evaluated = evaluated_stages(stages, [name for name in (*CARD, *DIVERSE_STAGES) if name in stages])
    comparison = compare_evaluations(a, list(evaluated), meta)
    table = []
    for name, done in evaluated.items():
        ev = done["eval"]
        row = {"stage": name, "validation": ev.get("validation", {}).get("success"),
               "holdout": ev.get("holdout", {}).get("success"), "holdout_at_cap": ev.get("holdout", {}).get("at_cap"),
               "grpo_steps": done.get("steps", 0),
               "train_wall_s": round(done.get("train_wall_s", 0.0), 1), "card_qwen35_9b": CARD.get(name)}  # fmt: skip
        if "steps_note" in done:  # a stage file corrected by hand says how
            row["steps_note"] = done["steps_note"]
        warm = warm_start_of(name)
        if warm in evaluated and row["holdout"] is not None and evaluated[warm]["eval"].get("holdout"):
            row["holdout_gain_over_warm_start"] = round(row["holdout"] - evaluated[warm]["eval"]["holdout"]["success"], 4)
            paired = comparison.get(name, {})
            row["holdout_gain_paired_ci95"] = [round(x, 4) for x in paired["diff_ci95"]] if paired.get("diff_from") == warm else None
        table.append(row)
    settings = {k: v for k, v in meta.get("settings", {}).items() if k not in UNRECORDED}
    result = {"table": table, "model": meta.get("model"), "device": meta.get("device"), "settings": settings,
              "grpo_overhead_ratio": stages.get("overhead", {}).get("grpo_overhead_ratio"),
              "overhead": stages.get("overhead"),
              "not_run": [s for s in (*CARD, "overhead") if s not in stages and s not in cut_short],
              "cut_short": {k: f"trained, then ended before its evaluation and stage file (lost lease); {len(updates)} "
                               f"updates read from {k}.log" for k, (_, updates) in cut_short.items()},
              "curves": {**{k: v["curve"] for k, v in stages.items() if "curve" in v},
                         **{k: curve for k, (curve, _) in cut_short.items()}},
              "updates": {**{k: v.get("updates") or from_log(a.out / f"{k}.log")[1] for k, v in stages.items() if "curve" in v},
                          **{k: updates for k, (_, updates) in cut_short.items()}},
              "stage_settings": {k: v["settings"] for k, v in stages.items() if "settings" in v},  # where not `settings`
              "segments": {k: v["segments"] for k, v in stages.items() if "segments" in v},  # GRPO stretches, resumes
              "stage_commands": stage_commands(a.out)}  # fmt: skip
    dest = Path("benchmarks/results")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{a.result}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, dest / f"{a.result}.png")
    if comparison:
        for suffix in ("json", "png"):
            (dest / f"{a.result}_evals.{suffix}").write_bytes((a.out / "report" / f"comparison.{suffix}").read_bytes())
    log.info("wrote %s", dest / f"{a.result}.json")


def cut_short_runs(out: Path, stages: dict[str, dict]) -> dict[str, tuple[list[dict], list[dict]]]:
    """GRPO runs that trained but wrote no stage file (the lease was lost before their evaluation),
    read from their logs: a stage's first run (``grpo93.log``, no ``grpo93.json``), or a
    continuation (``grpo93-from8.log``) whose stage file still holds the step it resumed from; their
    steps numbered as the trainer counts them."""
    found = {}
    for path in sorted(out.glob("grpo*.log")):
        name, _, resumed = path.stem.partition("-from")
        done = stages.get(name)
        # a continuation's own stage file would hold more steps than it resumed from
        lost = (done is not None and done.get("steps", 0) <= int(resumed)) if resumed else done is None
        if lost:
            shift = int(resumed or 0)
            found[path.stem] = tuple([{**r, "step": r["step"] + shift} for r in records] for records in from_log(path))
    return found


def evaluated_stages(stages: dict[str, dict], names: list[str]) -> dict[str, dict]:
    """The stages in table order, a GRPO stage's checkpoint evaluations (``grpo93-step20``, from
    ``--grpo_eval_every``, each ``{"steps": k, "eval": ...}``) just before it, as stages of their own."""
    found = {}
    for name in names:
        found.update(stages[name].get("checkpoint_evals", {}))
        found[name] = stages[name]
    return found


def warm_start_of(stage: str) -> str | None:
    """The SFT stage a GRPO stage or checkpoint starts from (``grpo93``, ``grpo93-step20`` -> ``sft93``)."""
    return stage.split("-step")[0].replace("grpo", "sft") if stage.startswith("grpo") else None


def compare_evaluations(a, names: list[str], meta: dict) -> dict[str, dict]:
    """``rlplugs report`` over the stages' evaluations, each GRPO stage measured from its own warm
    start (paired, on the same holdout rows): the holdout rows of its table by stage, or {} when
    no stage left an evaluation folder."""
    evals = [name for name in names if (a.out / f"eval-{name}" / "report.json").exists()]
    if not evals:
        return {}
    against = ",".join(f"{name}={warm_start_of(name)}" for name in evals if warm_start_of(name) in evals)
    model = (meta.get("model") or "").split(" (")[0]
    subprocess.run(rlplugs_cli("report", *(str(a.out / f"eval-{name}") for name in evals), "--labels", ",".join(evals),
                               "--out", str(a.out / "report"), "--title", f"factorio-build, {model}",
                               *(["--against", against] if against else [])), check=True)  # fmt: skip
    table = json.loads((a.out / "report" / "comparison.json").read_text())["table"]
    return {row["run"]: row for row in table if row["split"] == "holdout"}


def plot(result: dict, path: Path) -> None:
    """Left: success per stage next to the card's; middle: mean GRPO reward per generation batch;
    right: the gradient norm of every optimizer step (where a run breaks, it shows first); both
    GRPO panels mark where a continued run resumed."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (left, right, norms) = plt.subplots(1, 3, figsize=(16, 4))
    names = [r["stage"] for r in result["table"]]
    x = range(len(names))
    for offset, split in ((-0.2, "validation"), (0.2, "holdout")):  # a split not evaluated draws no bar
        left.bar([i + offset for i in x], [math.nan if r[split] is None else r[split] for r in result["table"]], 0.4, label=split)
    carded = [(i, r["card_qwen35_9b"]["holdout"]) for i, r in zip(x, result["table"]) if r["card_qwen35_9b"]]
    left.scatter([i + 0.2 for i, _ in carded], [v for _, v in carded], color="k",
                 marker="_", s=400, zorder=3, label="card holdout (Qwen3.5-9B)")  # fmt: skip
    left.set_xticks(list(x), names, rotation=20 if len(names) > 4 else 0)
    left.set_ylim(0, 1.05)
    left.set_ylabel("success (fraction of scenes verified)")
    left.set_title(f"factorio-build, {result['model'].split(' (')[0]}")
    left.legend(fontsize=8, loc="upper left")
    for name, curve in result["curves"].items():
        cut = " (cut short)" if name in result.get("cut_short", {}) else ""
        right.plot([c["step"] for c in curve], [c["reward"] for c in curve], marker="o", label=name + cut)
    right.set_xticks(sorted({c["step"] for curve in result["curves"].values() for c in curve}))
    right.set_xlabel("GRPO step at which a generation batch was drawn (T = 0.7)")
    right.set_ylabel("mean reward of the batch (success + 0.1 validity)")
    right.set_title("GRPO reward per step")
    for name, updates in result.get("updates", {}).items():
        norms.plot([u["step"] for u in updates], [u["grad_norm"] for u in updates], marker=".", label=name)
    for name, segments in result.get("segments", {}).items():  # a continued run may change settings there
        for segment in segments[1:]:
            for ax in (right, norms):
                ax.axvline(segment["start_step"] + 0.5, color="grey", linestyle="--", linewidth=1,
                           label=f"{name} resumed after step {segment['start_step']}")  # fmt: skip
    norms.set_yscale("log")
    norms.xaxis.set_major_locator(MaxNLocator(integer=True))
    norms.set_xlabel("optimizer step")
    norms.set_ylabel("gradient norm before clipping to 1.0")
    norms.set_title("GRPO gradient norm per update")
    right.legend()
    norms.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    a = parse()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if a.collect:
        return collect(a)
    a.out.mkdir(parents=True, exist_ok=True)
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() and not a.cpu else "cpu"
    meta_path = a.out / "meta.json"
    settings = {k: str(v) for k, v in vars(a).items()}
    if not meta_path.exists():
        from rlplugs.testing.smollm2 import SMOLLM2_NAME

        meta_path.write_text(json.dumps({"model": a.model or SMOLLM2_NAME,
                                         "device": device, "settings": settings}, indent=2))  # fmt: skip
    # a later call into the same folder (the B chain's EXTRA_B) may run with other settings: its stages say which
    first = json.loads(meta_path.read_text())["settings"]
    own = {k: v for k, v in settings.items() if k not in UNRECORDED and first.get(k) != v}
    for name in filter(None, a.stages.split(",")):
        stage_file = a.out / f"{name}.json"
        earlier = json.loads(stage_file.read_text()) if stage_file.exists() else None
        if earlier is not None and not continues(a, name, earlier):  # resumable: a later call goes on where one stopped
            log.info("stage %s already done", name)
            continue
        start = time.perf_counter()
        result = stage(a, name, earlier)
        result["stage_wall_s"] = round(time.perf_counter() - start, 1)
        if own:
            result["settings"] = own
        stage_file.write_text(json.dumps(result, indent=2))
        log.info("stage %s done in %.0fs: %s", name, result["stage_wall_s"], result.get("eval", result.get("grpo_overhead_ratio")))


if __name__ == "__main__":
    main()
