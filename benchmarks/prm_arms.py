"""Issue 19's item 3 across every arm that ran: the goal's three paired differences (PRM - random,
random - greedy, PRM - greedy), one row per ``prm_guidance.py`` result, in one table and one picture.

Each arm's own file answers the goal for that arm; this asks whether the answer holds across arms
(other SFT checkpoints, candidates, labels and pickers): how many arms put each difference above
or below 0, on the point estimate and beyond the paired interval. An arm that reused another arm's
SFT checkpoint (``--sft-first 0``) is counted, and marked, but is not a fresh draw of the policy.

    python benchmarks/prm_arms.py              # every benchmarks/results/prm_guidance_*.json with differences
    python benchmarks/prm_arms.py A.json B.json --out arms.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# beside this script (python benchmarks/prm_arms.py)
from paired_clemscore import GOAL_DIFFERENCES as GOAL

RESULTS = Path(__file__).parent / "results"
SHORT = {"best_of_n_prm": "PRM", "best_of_n_random": "random", "greedy": "greedy"}


def describe(settings: dict[str, Any]) -> str:
    """What set this arm apart, in a few words (the settings the arms were varied in)."""
    parts = [f"T {settings['temperature']}"]
    if settings.get("top_p") is not None:
        parts.append(f"top_p {settings['top_p']}")
    if settings.get("policy_reply"):
        parts.append("greedy reply first")
    if settings.get("margin"):
        parts.append(f"margin {settings['margin']}")
    if settings.get("label_finish") == "greedy":
        parts.append("greedy-play labels")
    elif settings.get("prm") is None:
        parts.append(f"{settings['label_episodes']} label episodes")
    if not settings.get("sft_first"):
        parts.append("SFT of the arm before" + (", its PRM" if settings.get("prm") else ""))
    return ", ".join(parts)


def arm_row(path: Path) -> dict[str, Any] | None:
    """One arm's row: its name, settings and the goal's differences it measured (None: it measured none)."""
    result = json.loads(path.read_text())
    found = {f"{a}-{b}": result.get("differences", {}).get(f"{a}-{b}") for a, b in GOAL}
    if not any(found.values()):
        return None
    return {"arm": path.stem.removeprefix("prm_guidance_"), "episodes": result["episodes"],
            "fresh_sft": bool(result["settings"].get("sft_first")), "settings": describe(result["settings"]),
            "differences": {k: v for k, v in found.items() if v}}  # fmt: skip


def tally(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per difference: arms measured, above and below 0 on the point estimate, and beyond the interval."""
    counts = {}
    for a, b in GOAL:
        got = [r["differences"][f"{a}-{b}"] for r in rows if f"{a}-{b}" in r["differences"]]
        got = [d for d in got if d["value"] is not None]
        counts[f"{a}-{b}"] = {
            "arms": len(got),
            "above_0": sum(d["value"] > 0 for d in got),
            "below_0": sum(d["value"] < 0 for d in got),
            "interval_above_0": sum(bool(d["ci95"]) and d["ci95"][0] > 0 for d in got),
            "interval_below_0": sum(bool(d["ci95"]) and d["ci95"][1] < 0 for d in got),
        }
    return counts


def label(key: str) -> str:
    a, b = key.split("-")
    return f"{SHORT[a]} - {SHORT[b]}"


def markdown(rows: list[dict[str, Any]], counts: dict[str, dict[str, int]]) -> str:
    def cell(entry: dict[str, Any] | None) -> str:
        if not entry:
            return ""
        ci = entry["ci95"]
        return f"{entry['value']:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else f"{entry['value']:+.2f}"

    keys = [f"{a}-{b}" for a, b in GOAL]
    lines = ["| arm | episodes | " + " | ".join(label(k) for k in keys) + " |", "|---" * (2 + len(keys)) + "|"]
    lines += [f"| {r['arm']} ({r['settings']}) | {r['episodes']} | " + " | ".join(cell(r["differences"].get(k)) for k in keys) + " |"
              for r in rows]  # fmt: skip
    lines += ["", "| difference | arms | above 0 | below 0 | interval above 0 | interval below 0 |", "|---|---|---|---|---|---|"]
    lines += [f"| {label(k)} | {c['arms']} | {c['above_0']} | {c['below_0']} | {c['interval_above_0']} | {c['interval_below_0']} |"
              for k, c in counts.items()]  # fmt: skip
    return "\n".join(lines)


def picture(rows: list[dict[str, Any]], path: Path) -> Path:
    """One panel per difference: each arm's paired difference with its 95% interval, and 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlplugs.tools.report import fit_title

    keys = [f"{a}-{b}" for a, b in GOAL]
    fig, axes = plt.subplots(1, len(keys), figsize=(13, 0.42 * len(rows) + 1.6), sharey=True)
    for ax, key in zip(axes, keys, strict=True):
        for y, row in enumerate(rows):
            entry = row["differences"].get(key)
            if not entry or entry["value"] is None:
                continue
            ci = entry["ci95"] or [entry["value"]] * 2
            colour = "tab:green" if ci[0] > 0 else "tab:red" if ci[1] < 0 else "tab:grey"
            ax.errorbar(entry["value"], y, xerr=[[entry["value"] - ci[0]], [ci[1] - entry["value"]]], fmt="o" if row["fresh_sft"] else "s",
                        color=colour, mfc=colour if row["fresh_sft"] else "white", capsize=3)  # fmt: skip
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlabel(f"{label(key)}, clemscore points (paired 95%)")
        fit_title(ax, f"goal: {label(key)} > 0")
    axes[0].set_yticks(range(len(rows)), [f"{r['arm']} ({r['episodes']})" for r in rows], fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle("clembench-games self-play, SmolLM2-135M after SFT on won games: issue 19 item 3 in every arm "
                 "(filled: fresh SFT checkpoint; open: the arm before's)", fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the goal's paired differences of every prm_guidance arm, in one table and picture")
    p.add_argument("results", nargs="*", type=Path, help="prm_guidance result files (default: all in benchmarks/results)")
    p.add_argument("--out", type=Path, default=RESULTS / "prm_guidance_arms.json", help="the table as JSON; the picture beside it (.png)")
    args = p.parse_args(argv)
    paths = args.results or sorted(RESULTS.glob("prm_guidance_*.json"))
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        sys.exit(f"no such result file: {', '.join(missing)}")
    rows = [row for row in map(arm_row, (p for p in paths if p.resolve() != args.out.resolve())) if row]
    if not rows:
        sys.exit("none of these results measured a goal difference (PRM - random, random - greedy, PRM - greedy)")
    counts = tally(rows)
    command = "python benchmarks/prm_arms.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    args.out.write_text(json.dumps({"arms": rows, "counts": counts, "command": command}, indent=2) + "\n")
    picture(rows, args.out.with_suffix(".png"))
    print(markdown(rows, counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
