"""clemscore of several guidance modes played on the same episodes, with paired bootstrap intervals
(``benchmarks/prm_guidance.py``): every mode is resampled with the same episode draws, so the
differences between modes get intervals too, and issue 19's goal is checked on those numbers.

clembench leaves clemscore undefined where no episode was played (every one aborted). That is not
a score of 0: such a mode is *unscored* (None), and a bootstrap resample in which a mode has no
played episode is left out of that mode's interval (and of the differences it is part of), with
the number left out in the result (``rlplugs.tools.report.bootstrap_interval``'s convention).

Across two result files (two arms: other candidates, another PRM, ...) played on the same held-out
instances, the difference of one mode in each gets its paired interval from the episodes each file
keeps (``episode_metrics``, which ``prm_guidance.py`` writes):

    python benchmarks/paired_clemscore.py A.json:best_of_n_random B.json:best_of_n_random
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

GOAL_WALL_RATIO = 4.5  # wall time PRM best-of-N / greedy
# the goal's differences (issue 19), each to lie above 0: PRM best-of-N > random best-of-N > greedy
GOAL_DIFFERENCES = (("best_of_n_prm", "best_of_n_random"), ("best_of_n_random", "greedy"), ("best_of_n_prm", "greedy"))
# and the outcome bound's (an oracle pick among the same kind of candidates): how far greedy and the
# PRM's pick fall below it
DIFFERENCES = (*GOAL_DIFFERENCES, ("best_of_n_outcome", "greedy"), ("best_of_n_outcome", "best_of_n_prm"))


def clemscore(records: list[dict[str, Any]]) -> float | None:
    """clemscore of ``records``; None (unscored) when no episode was played."""
    from clembench_games.scoring import clem_table

    value = clem_table(records)["clemscore"] if records else math.nan
    return None if math.isnan(value) else value


def difference(better: float | None, worse: float | None) -> float | None:
    return None if better is None or worse is None else better - worse


def with_intervals(played: dict[str, list[dict[str, Any]]], resamples: int, seed: int,
                   differences: tuple[tuple[str, str], ...] = DIFFERENCES, per_mode: bool = True) -> dict[str, Any]:
    """Bootstrap 95% intervals over episodes of each mode's clemscore (unless ``per_mode`` is off:
    a paired comparison needs only its difference) and of the goal's differences:
    ``{"modes": {mode: [low, high] | None}, "differences": {"a-b": {"value", "ci95"}},
    "unscored_resamples": {mode or "a-b": count}}`` (the counts only where some were left out)."""
    from rlplugs.tools.report import bootstrap_interval

    size = len(next(iter(played.values())))
    unscored: dict[str, int] = {}

    def interval(name: str, stat) -> list[float] | None:
        found = bootstrap_interval(stat, size, resamples, seed)
        if found is None:
            unscored[name] = resamples if size else 0
            return None
        if found.unscored:
            unscored[name] = found.unscored
        return [found.low, found.high]

    def score(mode: str, picks: list[int]) -> float | None:
        return clemscore([played[mode][i] for i in picks])

    modes = {m: interval(m, lambda p, m=m: score(m, p)) for m in played} if per_mode else {}
    out: dict[str, Any] = {"modes": modes, "differences": {}}
    for better, worse in differences:
        if better in played and worse in played:
            name = f"{better}-{worse}"
            out["differences"][name] = {
                "value": difference(clemscore(played[better]), clemscore(played[worse])),
                "ci95": interval(name, lambda p, b=better, w=worse: difference(score(b, p), score(w, p))),
            }
    out["unscored_resamples"] = {k: v for k, v in unscored.items() if v}
    return out


def goal_check(out: dict[str, Any]) -> dict[str, Any]:
    """Issue 19's goal from the result's own numbers: PRM best-of-N > random best-of-N > greedy in
    clemscore (point estimates, and whether the paired intervals of both differences lie above 0),
    and wall PRM best-of-N / greedy <= 4.5."""
    modes = out["modes"]
    needed = ("greedy", "best_of_n_random", "best_of_n_prm")
    if not all(m in modes for m in needed):
        return {"checked": False, "why": f"needs the modes {', '.join(needed)}"}
    score = {m: out["clemscore"][m] for m in needed}
    if any(v is None for v in score.values()):
        return {"checked": False, "why": f"unscored: {', '.join(m for m in needed if score[m] is None)} played no episode"}
    ordered = score["best_of_n_prm"] > score["best_of_n_random"] > score["greedy"]
    diffs = [out["differences"][k]["ci95"] for k in ("best_of_n_prm-best_of_n_random", "best_of_n_random-greedy")]
    separated = all(ci is not None and ci[0] > 0 for ci in diffs)
    ratio = modes["best_of_n_prm"]["wall_s"] / modes["greedy"]["wall_s"]

    def interval(ci: list[float] | None) -> str:
        return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "n/a"

    def show(m: str) -> str:
        return f"{score[m]:.2f} {interval(modes[m]['clemscore_ci95'])}"

    text = (f"clemscore PRM best-of-{out['settings']['n']} {show('best_of_n_prm')} vs random "
            f"{show('best_of_n_random')} vs greedy {show('greedy')}: order "
            f"{'holds' if ordered else 'does not hold'} on the point estimates, and the paired 95% intervals of "
            f"PRM-random {interval(diffs[0])} and random-greedy {interval(diffs[1])} {'both lie' if separated else 'do not both lie'} above 0; "
            f"wall ratio PRM best-of-N / greedy {ratio:.2f} ({'<=' if ratio <= GOAL_WALL_RATIO else '>'} {GOAL_WALL_RATIO}).")
    return {"checked": True, "order_holds": ordered, "order_holds_beyond_intervals": separated,
            "wall_ratio_best_of_n_prm_vs_greedy": ratio, "wall_ratio_met": ratio <= GOAL_WALL_RATIO,
            "met": ordered and ratio <= GOAL_WALL_RATIO, "text": text}  # fmt: skip


def arm(spec: str) -> tuple[str, list[dict[str, Any]], list[str]]:
    """``FILE:MODE`` -> (its name, the mode's episode records, their instances as game/instance_id)."""
    path, _, mode = spec.rpartition(":")
    if not path or not Path(path).is_file():
        sys.exit(f"{spec}: expected FILE:MODE with FILE a prm_guidance result")
    episodes = json.loads(Path(path).read_text()).get("episode_metrics")
    if episodes is None:
        sys.exit(f"{path} keeps no episode_metrics (written by an older prm_guidance): rerun it to compare it paired")
    if mode not in episodes:
        sys.exit(f"{path} has no mode {mode!r}; it has {', '.join(episodes)}")
    return spec, episodes[mode], [f"{e['game']}/{e['instance_id']}" for e in episodes[mode]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the paired difference SECOND - FIRST of one mode in each of two prm_guidance results")
    p.add_argument("first", help="FILE:MODE, e.g. prm_guidance_a.json:best_of_n_random")
    p.add_argument("second", help="FILE:MODE, played on the same held-out instances")
    p.add_argument("--resamples", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.first == args.second:
        sys.exit(f"{args.first} twice: name two arms (two files, or two modes of one)")
    (a, a_eps, a_ids), (b, b_eps, b_ids) = arm(args.first), arm(args.second)
    if a_ids != b_ids:
        sys.exit(f"{a} and {b} were played on other held-out instances (or in another order): no pairing")
    found = with_intervals({a: a_eps, b: b_eps}, args.resamples, args.seed, differences=((b, a),), per_mode=False)
    pair = found["differences"][f"{b}-{a}"]
    diff, ci = pair["value"], pair["ci95"]
    if diff is None:
        print(f"{b} - {a}: unscored (an arm played none of its {len(a_ids)} episodes)")
    else:
        interval = f"[{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "[n/a]"
        print(f"{b} - {a}: {diff:+.2f} {interval}, paired 95% bootstrap interval over {len(a_ids)} episodes "
              f"(clemscore {clemscore(b_eps):.2f} vs {clemscore(a_eps):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
