"""Does a PRM trained on a small model's own rollouts make it play clembench-games better, and is
that the PRM's doing or only the sampling of several candidates?

One run, side by side on the same held-out (test-split) instances, one episode per instance:

0. **SFT on won games** (``--sft-first N``, the model card's order): the message-only reference
   policy plays N train-split episodes per game in self-play (``clembench_games.cli.collect``, as
   ``rlplugs games collect`` does; SmolLM2-135M alone cannot write clembench 2.0's strict reply
   formats, so its own wins are too few to learn from), ``rlplugs games sft-data`` keeps the won
   episodes' turns, and ``rlplugs sft --sft_dataset won-episodes`` fine-tunes the policy on them
   (subprocesses: the user's commands). Everything after uses that checkpoint;
1. **label**: the policy plays train-split instances at ``--temperature`` (within ``--top-p``,
   which the candidates use too); every learner turn gets
   Monte-Carlo labels (``--candidates`` sampled turns x ``--k`` continuations each) or
   outcome-propagated labels. With ``--label-finish greedy`` the greedy policy plays the label
   games and every continuation (``--k 1``), and the candidates are made as the guided modes make
   them (``--policy-reply`` puts the greedy reply first): each candidate is then valued as
   best-of-N with greedy turns meets it, the value the outcome bound reads off the game. The
   outcome is ``--outcome`` (default: mean of ``main_score`` and ``played``, so a turn that keeps
   the game going is worth something even when it is lost);
2. **train**: a PRM over the same checkpoint (``rlplugs.builtins.prm.train``);
3. **evaluate** (``--modes``), each with a clock around it, every guided mode built through the
   guidance registry as ``rlplugs eval --guidance`` builds it:

   - ``greedy``: the policy alone;
   - ``best_of_n_random`` (``best-of-n-random``): ``--n`` candidates per learner turn, one played
     at random: the same as sampling one reply at ``--temperature`` (and ``--top-p``), the control for the PRM;
   - ``best_of_n_outcome`` (``best-of-n-outcome``): the candidate whose one greedy rollout to the
     end had the best outcome. It reads the game's true result at test time (the hidden secret
     word or grid plays along in the cloned game), so it is an **upper bound** for a selector,
     not a fair competitor, and the slowest mode (a rollout per candidate and turn);
   - ``best_of_n_prm`` (``best-of-n``): the PRM picks among the ``--n`` candidates;
   - ``beam_prm`` (``beam``): PRM-ranked beam search.

   With ``--policy-reply`` the first candidate of every guided turn is the greedy policy's own
   reply and only ``--n`` - 1 are sampled: the random pick is then greedy one time in N, and a
   PRM can always fall back on the greedy turn (session 20: sampled candidates broke the strict
   formats so often that random best-of-4 fell below greedy).

Scores: clemscore = (mean % played / 100) x mean quality over games (clembench's formula, on the
clean-room games), with a 95% bootstrap interval over episodes (``rlplugs.tools.report.
bootstrap_interval``; every mode is resampled with the same draws, so the differences between
modes get paired intervals too: ``paired_clemscore``). Where no episode was played clembench leaves
clemscore undefined: that mode is unscored (None, with the reason under ``unscored``), not 0, and a
resample in which a mode played nothing is left out of its interval (counted under
``unscored_resamples``).

**Goal** (issue 19, item 3): PRM best-of-N > random best-of-N > greedy in clemscore, and wall
time PRM best-of-N / greedy <= 4.5. The result says whether the order holds on the point
estimates and whether the paired intervals of the two differences lie above 0 (``paired_clemscore.
goal_check``).

Writes ``--out`` (default ``benchmarks/results/prm_guidance.json``) with the scores, intervals,
wall times, the SFT data and label/PRM statistics, each mode's episodes (``episode_metrics``: another
arm on the same instances compares paired, ``python benchmarks/paired_clemscore.py A:MODE B:MODE``)
and the command. Everything is an argument
(``--device``, sizes), so the same script runs at toy scale on a CPU and at full scale on a GPU
(``benchmarks/device/prm_guidance.sh``).

    python benchmarks/prm_guidance.py --device cuda --sft-first 24 --label-episodes 48 --episodes 128
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import re
import shlex
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

# beside this script (python benchmarks/prm_guidance.py)
from logged_command import rlplugs_cli, run_logged
from paired_clemscore import DIFFERENCES, clemscore, goal_check, with_intervals

log = logging.getLogger("prm_guidance")

# written into this script's SFT checkpoint: the policy it is, for arms that reuse it with --model
SFT_ORIGIN = "prm_guidance_sft.json"
MODES = ("greedy", "best_of_n_random", "best_of_n_outcome", "best_of_n_prm", "beam_prm")
# guided mode -> its registered guidance strategy
GUIDANCE = {"best_of_n_random": "best-of-n-random", "best_of_n_outcome": "best-of-n-outcome",
            "best_of_n_prm": "best-of-n", "beam_prm": "beam"}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="policy checkpoint dir (default: SmolLM2-135M-Instruct via rlplugs.testing.smollm2)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--games", default="all", help="comma-separated clembench-games games, or 'all'")
    p.add_argument("--seats", choices=["self-play", "single"], default="self-play",
                   help="self-play (clembench protocol: the policy plays every LLM seat) or one seat per row vs a scripted partner")
    p.add_argument("--partner", choices=["perfect", "random"], default="perfect", help="scripted partner when --seats single")
    p.add_argument("--sft-first", type=int, default=0, metavar="N",
                   help="SFT the policy first on the won games of N reference-policy train episodes per game (0: no SFT)")
    p.add_argument("--sft-epochs", type=float, default=2.0)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    p.add_argument("--sft-batch-size", type=int, default=8)
    p.add_argument("--sft-max-length", type=int, default=2048, help="tokens per SFT sample (prompt + reply)")
    p.add_argument("--sft-max-steps", type=int, default=-1, help="cap the SFT steps (toy runs)")
    p.add_argument("--label-episodes", type=int, default=24, help="train-split episodes rolled out for labels")
    p.add_argument("--episodes", type=int, default=24, help="held-out test-split episodes per mode")
    p.add_argument("--test-per-experiment", type=int, default=None, metavar="N",
                   help="test instances per game experiment (the env's option; default 8 gives 16 wordle instances, "
                        "12 gives 24 of every game, a superset of the default's)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--label-method", choices=["monte_carlo", "outcome"], default="monte_carlo")
    p.add_argument("--k", type=int, default=2, help="monte_carlo: continuations per candidate")
    p.add_argument("--candidates", type=int, default=2, help="monte_carlo: candidates per learner turn")
    p.add_argument("--label-finish", choices=["sampled", "greedy"], default="sampled",
                   help="monte_carlo: who plays the label games and the continuations (greedy: candidates as --policy-reply makes them)")
    p.add_argument("--outcome", default='{"main_score": 1.0, "played": 1.0}',
                   help="outcome weights (JSON) of the labels and of best_of_n_outcome's pick")
    p.add_argument("--n", type=int, default=4, help="candidates per learner turn (best-of-n modes and beam)")
    p.add_argument("--beam-width", type=int, default=2)
    p.add_argument("--iterations", type=int, default=2, help="beam: learner turns searched")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of labels and candidates")
    p.add_argument("--top-p", type=float, default=None, help="nucleus of the label rollouts' and the candidates' sampling (default: none)")
    p.add_argument("--policy-reply", action="store_true",
                   help="the greedy policy's own reply is the first of the N candidates (N - 1 sampled) in every guided mode")
    p.add_argument("--margin", type=float, default=0.0,
                   help="best_of_n_prm with --policy-reply: keep the greedy reply unless a candidate's PRM score leads it "
                        "by more than this")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32, help="conversations per generate() call")
    p.add_argument("--prm", help="reuse this trained PRM directory (skips label and train)")
    p.add_argument("--prm-epochs", type=float, default=2.0)
    p.add_argument("--prm-lr", type=float, default=5e-5)
    p.add_argument("--prm-batch-size", type=int, default=8)
    p.add_argument("--lora", action="store_true", help="train the PRM as LoRA (merged on save)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples of the intervals")
    p.add_argument("--work", default="runs/prm_guidance", help="directory for SFT data and model, labels and the PRM")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/prm_guidance.json")
    p.add_argument("--annotate", metavar="RESULT_JSON",
                   help="only (re)write the goal check and the picture of an existing result file from its own numbers, "
                        "adding the paired differences it lacks from its episodes, then exit")
    args = p.parse_args(argv)
    unknown = sorted(set(args.modes.split(",")) - set(MODES))
    if unknown:
        p.error(f"--modes: unknown {unknown}; choose from {', '.join(MODES)}")
    if args.label_finish == "greedy" and (args.label_method != "monte_carlo" or args.k != 1):
        p.error("--label-finish greedy plays every candidate out once by monte_carlo: pass --k 1")
    if args.margin and not args.policy_reply:  # before the SFT and the labels, not at best_of_n_prm's turn
        p.error("--margin keeps the greedy reply: pass --policy-reply as well")
    return args


def balanced_rows(spec, split: str, count: int) -> list[dict[str, Any]]:
    """``count`` rows of ``split`` taken round-robin over games, so every game is represented. In
    self-play every seat's row of an instance plays the same episode: each instance is kept once."""
    by_game: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[tuple] = set()
    for row in spec.dataset(split):
        key = (row["game"], row["instance_id"]) if row["self_play"] else (row["game"], row["instance_id"], row["seat"])
        if key not in seen:
            seen.add(key)
            by_game[row["game"]].append(row)
    rows: list[dict[str, Any]] = []
    for i in range(max(len(v) for v in by_game.values())):
        rows += [v[i] for v in by_game.values() if i < len(v)]
    return rows[:count]


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def rlplugs_command(args: list[str], log_path: Path) -> float:
    """Run ``rlplugs ARGS`` (the user's command) with its output in ``log_path``; wall seconds."""
    return run_logged(rlplugs_cli(*args), log_path, f"rlplugs {args[0]}")


def sft_on_won_games(args, games: list[str], base: str, device: str) -> tuple[str, dict[str, Any]]:
    """Stage 0: reference-policy train episodes -> won turns -> ``rlplugs sft``; the SFT checkpoint."""
    from clembench_games.cli import collect

    from rlplugs import as_batch_policy, make_env

    work = Path(args.work)
    runs, data, out = work / "reference-train", work / "won.jsonl", work / "sft"
    shutil.rmtree(runs, ignore_errors=True)  # collect adds to a run directory; start clean
    reference = as_batch_policy(make_env("clembench-games", {"games": games}).reference_policy)
    saved, collect_s = timed(lambda: collect(reference, games, args.sft_first, runs, split="train"))
    data_s = rlplugs_command(["games", "sft-data", "--runs", str(runs), "--out", str(data)], work / "sft-data.log")
    precision = ["--bf16", "true"] if device.startswith("cuda") else ["--use_cpu", "true", "--bf16", "false"]
    sft_s = rlplugs_command(
        ["sft", "--env", "clembench-games", "--env_args", json.dumps({"games": games, "sft_data": str(data)}),
         "--sft_dataset", "won-episodes", "--model_name_or_path", base, "--output_dir", str(out),
         "--num_train_epochs", str(args.sft_epochs), "--max_steps", str(args.sft_max_steps),
         "--learning_rate", str(args.sft_lr), "--lr_scheduler_type", "cosine", "--warmup_steps", "0.05",
         "--per_device_train_batch_size", str(args.sft_batch_size), "--max_length", str(args.sft_max_length),
         "--gradient_checkpointing", "false", "--logging_steps", "5", "--save_strategy", "no", "--report_to", "none",
         "--seed", str(args.seed), "--num_processes", "1", *precision],
        work / "sft.log",
    )  # fmt: skip
    samples = [json.loads(line) for line in data.read_text().splitlines()]
    records = [json.loads(p.read_text()) for p in saved]
    by_game: dict[str, list[float]] = defaultdict(list)
    for r in records:
        by_game[r["game"]].append(r["metrics"].get("Success") == 1.0)
    stats = {
        "reference_episodes": len(records), "won_episodes": int(sum(sum(v) for v in by_game.values())),
        "won_share_by_game": {g: sum(v) / len(v) for g, v in sorted(by_game.items())},
        "sft_samples": len(samples), "sft_data_bytes": data.stat().st_size,
        "sft_samples_by_game": {g: sum(s["game"] == g for s in samples) for g in sorted(by_game)},
        "collect_wall_s": collect_s, "sft_data_wall_s": data_s, "sft_wall_s": sft_s,
        "sft_train_loss": _train_loss(work / "sft.log"),
    }  # fmt: skip
    log.info("SFT on %d samples from %d won of %d reference episodes: %.1fs", len(samples), stats["won_episodes"],
             len(records), sft_s)  # fmt: skip
    (out / SFT_ORIGIN).write_text(json.dumps({"policy": policy_name(base, sft=True)}) + "\n")
    return str(out), stats


def _train_loss(log_path: Path) -> float | None:
    """The mean training loss the Trainer printed at its end (``'train_loss': x``), if it did."""
    import re

    found = re.findall(r"'train_loss': '?([0-9.eE+-]+)", log_path.read_text())
    return float(found[-1]) if found else None


def label_and_train(args, spec, policy, model_dir: str, device: str) -> tuple[str, dict[str, Any]]:
    from rlplugs import play_lockstep
    from rlplugs.builtins.prm.guidance import Proposer, sampler
    from rlplugs.builtins.prm.labels import monte_carlo_labels, outcome_labels, save_rows
    from rlplugs.builtins.prm.train import PRMTrainConfig, train_prm

    work = Path(args.work)
    weights = json.loads(args.outcome)
    episodes = [spec.episodes(r) for r in balanced_rows(spec, "train", args.label_episodes)]
    sampling = sampler(policy, args.temperature, args.top_p)
    if args.label_method == "monte_carlo" and args.label_finish == "greedy":  # policy is the greedy one
        propose = Proposer(policy, args.candidates, args.temperature, args.policy_reply, args.top_p)
        rows, label_s = timed(lambda: monte_carlo_labels(episodes, policy, weights, k=args.k, candidates=propose))
    elif args.label_method == "monte_carlo":
        rows, label_s = timed(lambda: monte_carlo_labels(episodes, sampling, weights, k=args.k, candidates=args.candidates))
    else:
        def rollouts():
            play_lockstep(episodes, sampling)
            return outcome_labels(episodes, weights)

        rows, label_s = timed(rollouts)
    if not rows:
        raise RuntimeError("no PRM rows were labelled")
    data = save_rows(rows, work / "labels.jsonl")
    config = PRMTrainConfig(data=str(data), model=model_dir, out=str(work / "prm"), lora=args.lora, epochs=args.prm_epochs,
                            learning_rate=args.prm_lr, batch_size=args.prm_batch_size, bf16=device.startswith("cuda"),
                            seed=args.seed)  # fmt: skip
    prm, train_s = timed(lambda: train_prm(config))
    summary = json.loads((prm / "prm_training.json").read_text())
    labels = [r["label"] for r in rows]
    stats = {
        "label_method": args.label_method, "label_finish": args.label_finish, "label_rows": len(rows), "label_mean": sum(labels) / len(labels),
        "label_nonzero_share": sum(v > 0 for v in labels) / len(labels), "label_wall_s": label_s,
        "label_turns_with_label_spread": _spread_share(rows), "prm_train_loss": summary["train_loss"],
        "prm_train_steps": summary["steps"], "prm_train_wall_s": train_s,
    }  # fmt: skip
    return str(prm), stats


def _spread_share(rows: list[dict[str, Any]]) -> float | None:
    """Share of learner turns whose candidates got different labels (what a PRM can learn from)."""
    by_turn: dict[tuple, set[float]] = defaultdict(set)
    for r in rows:
        m = r["meta"]
        by_turn[(m["episode"], m["seat"], m["turn"])].add(round(r["label"], 6))
    return sum(len(v) > 1 for v in by_turn.values()) / len(by_turn) if by_turn else None


def _no_nan(value: Any) -> Any:
    """JSON has no NaN: an undefined figure (e.g. Quality when every episode aborted) becomes null."""
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    return None if isinstance(value, float) and math.isnan(value) else value


def choice_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How often the search had a real choice and took a candidate other than the first sample."""
    turns = [t for r in records for t in r["guidance"]["turns"] if "candidates" in t]
    if not turns:
        return {}
    distinct = [len(set(t["candidates"])) > 1 for t in turns]
    return {"learner_turns": len(turns), "turns_with_distinct_candidates": sum(distinct) / len(turns),
            "turns_not_first_sample": sum(t["candidates"][t["chosen"]] != t["candidates"][0] for t in turns) / len(turns)}  # fmt: skip


def add_missing_differences(result: dict[str, Any]) -> None:
    """The paired differences a result written before their pair was listed lacks, from the episodes
    it keeps (same resamples and seed as the run); those it has stay as written."""
    missing = tuple(pair for pair in DIFFERENCES if "-".join(pair) not in result["differences"])
    if missing and "episode_metrics" in result:
        found = with_intervals(result["episode_metrics"], result["settings"]["resamples"], result["settings"]["seed"],
                               missing, per_mode=False)  # fmt: skip
        result["differences"].update(found["differences"])
        result["unscored_resamples"].update(found["unscored_resamples"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.annotate:
        result = json.loads(Path(args.annotate).read_text())
        if "clemscore" not in result:
            sys.exit(f"{args.annotate} has no clemscore table (a result written before the paired intervals): "
                     "--annotate rewrites only results that have one")
        add_missing_differences(result)
        result["goal"] = goal_check(result)
        Path(args.annotate).write_text(json.dumps(result, indent=2) + "\n")
        picture(result, Path(args.annotate).with_suffix(".png"))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch
    from clembench_games.scoring import clem_table
    from transformers import set_seed

    from rlplugs import get_registry, make_env, play_lockstep
    from rlplugs.tools.policies import HFPolicy

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if args.model is None:
        from rlplugs.testing.smollm2 import smollm2_dir

        args.model = str(smollm2_dir())
    options: dict[str, Any] = {"seats": args.seats, "partner": args.partner}
    if args.games != "all":
        options["games"] = args.games.split(",")
    if args.test_per_experiment:
        options["test_per_experiment"] = args.test_per_experiment
    spec = make_env("clembench-games", options)
    games = sorted({r["game"] for r in spec.dataset("test")})
    Path(args.work).mkdir(parents=True, exist_ok=True)

    sft_stats: dict[str, Any] = {}
    policy_dir = args.model
    if args.sft_first > 0:
        policy_dir, sft_stats = sft_on_won_games(args, games, args.model, device)
    policy = HFPolicy(policy_dir, temperature=0.0, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                      seed=args.seed, device=device)  # fmt: skip

    stats: dict[str, Any] = {}
    modes = args.modes.split(",")
    prm = args.prm
    if prm is None and any(m.endswith("_prm") for m in modes):
        set_seed(args.seed)
        prm, stats = label_and_train(args, spec, policy, policy_dir, device)
    held_out = balanced_rows(spec, "test", args.episodes)
    policy.generate([held_out[0]["prompt"]], n=args.n)  # warm-up (first-call costs), so no mode pays it
    registry = get_registry()
    candidates = {"n": args.n, "temperature": args.temperature, "top_p": args.top_p, "policy_reply": args.policy_reply}
    prm_options = {"prm": prm, "device": device, "batch_size": args.batch_size}
    guidance_options = {
        "best_of_n_random": {**candidates, "seed": args.seed},
        "best_of_n_outcome": {**candidates, "outcome": json.loads(args.outcome)},
        "best_of_n_prm": {**candidates, **prm_options, "margin": args.margin},
        "beam_prm": {**candidates, **prm_options, "beam_width": args.beam_width, "iterations": args.iterations},
    }

    def run(mode: str) -> tuple[list[Any], float]:
        """The held-out episodes played in ``mode``, and the wall seconds of the play alone."""
        episodes = [spec.episodes(r) for r in held_out]
        if mode == "greedy":
            set_seed(args.seed)
            return timed(lambda: play_lockstep(episodes, policy) or episodes)
        strategy = registry.get("guidance", GUIDANCE[mode]).build(guidance_options[mode])  # a PRM loads here, untimed
        set_seed(args.seed)  # the best-of-n modes sample the same first-round candidates
        return timed(lambda: strategy.play_all(episodes, policy))

    results: dict[str, Any] = {}
    played: dict[str, list[dict[str, Any]]] = {}
    for mode in modes:
        episodes, wall = run(mode)
        played[mode] = [ep.record() for ep in episodes]
        results[mode] = {"wall_s": wall, **_no_nan(clem_table(played[mode])), **(choice_stats(played[mode]) if mode != "greedy" else {})}
        log.info("%s: clemscore %s, %% played %.1f in %.1fs", mode, clemscore(played[mode]), results[mode]["% Played"], wall)
    intervals = with_intervals(played, args.resamples, args.seed)
    for mode in modes:
        results[mode]["clemscore_ci95"] = intervals["modes"][mode]

    out = {
        "clemscore": {m: clemscore(played[m]) for m in modes},
        "unscored": {m: "no held-out episode was played (all aborted): clembench leaves clemscore undefined"
                     for m in modes if clemscore(played[m]) is None},
        "clemscore_ci95": intervals["modes"],
        "differences": intervals["differences"],
        "unscored_resamples": intervals["unscored_resamples"],
        "wall_ratio_vs_greedy": {m: results[m]["wall_s"] / results["greedy"]["wall_s"] for m in modes} if "greedy" in modes else {},
        "episodes": len(held_out),
        "seats": args.seats,
        "games": games,
        "policy": policy_name(args.model, sft=bool(sft_stats)),
        "device": device if device == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})",
        "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "annotate")},
        "sft": sft_stats,
        "labels_and_prm": stats,
        "modes": results,
        # per mode, each held-out episode's game metrics in play order: other arms on the same
        # instances compare with these paired (python benchmarks/paired_clemscore.py A:MODE B:MODE)
        "episode_metrics": {m: [{"game": rec["game"], "instance_id": row["instance_id"], "metrics": rec["metrics"]}
                                for row, rec in zip(held_out, played[m])] for m in modes},
        "python": platform.python_version(), "torch": torch.__version__,
    }  # fmt: skip
    out["goal"] = goal_check(out)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    picture(out, Path(args.out).with_suffix(".png"))
    log.info("wrote %s: %s", args.out, out["goal"].get("text") or out["goal"]["why"])
    return 0


def picture(result: dict[str, Any], path: Path) -> None:
    """clemscore per mode with its interval, drawn by ``rlplugs report``'s comparison picture."""
    from rlplugs.tools.report import plot_comparison

    table = [{"run": mode, "split": f"{result['episodes']} held-out episodes", "metric": "clemscore",
              "mean": result["clemscore"][mode], "ci95": result["clemscore_ci95"].get(mode)} for mode in result["clemscore"]]  # fmt: skip
    settings = result["settings"]
    policy = re.sub(r" \([^)]*\)", "", result["policy"])  # the name without its packaging note
    nucleus = f", top_p {settings['top_p']}" if settings.get("top_p") is not None else ""
    candidates = f"candidates at T {settings['temperature']}{nucleus}" + (", the greedy reply first" if settings.get("policy_reply") else "")
    if settings.get("margin"):
        candidates += f", PRM pick kept unless {settings['margin']} above it"
    if settings.get("label_finish") == "greedy":
        candidates += "; PRM labels: each candidate played out greedily"
    plot_comparison(table, path, title=f"clembench-games self-play, {policy}\n{candidates}")


def policy_name(model: str, sft: bool) -> str:
    """The policy's name in the result and its picture. A checkpoint of this script's SFT stage
    names itself (its ``SFT_ORIGIN`` file), so an arm that reuses it with ``--model`` says what it is."""
    origin = Path(model) / SFT_ORIGIN
    if origin.is_file():
        return json.loads(origin.read_text())["policy"]
    from rlplugs.testing.smollm2 import SMOLLM2_NAME

    name = SMOLLM2_NAME if "smollm2" in model.lower() else model
    return f"{name} after SFT on won reference-policy games" if sft else name


if __name__ == "__main__":
    sys.exit(main())
