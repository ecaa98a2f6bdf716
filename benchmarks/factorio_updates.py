"""GRPO runs of ``factorio_repro.py`` side by side, update by update: the policy's entropy on each
batch's completions, the gradient norm and the rate of every optimizer step (and, with TRL's
off-policy mask, the share of negative-advantage rollouts it dropped), and the reward and share at
the token cap of every generation batch.

A run that breaks shows it here before any evaluation: the batch reward falls and the entropy on
the policy's own completions rises. The runs are result files written by ``factorio_repro.py
--collect`` (a stage a lost lease cut short included), each named ``FILE[:STAGE]=LABEL``.

    python benchmarks/factorio_updates.py benchmarks/results/factorio_repro_topp09.json="session 23" \\
        ... --out benchmarks/results/factorio_updates_topp09
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def load(run: str) -> tuple[str, dict]:
    """``FILE[:STAGE]=LABEL`` -> (label, {"updates": [...], "curve": [...]}) of that GRPO stage."""
    where, _, label = run.partition("=")
    path, _, stage = where.partition(":")
    result = json.loads(Path(path).read_text())
    stage = stage or next(iter(result["updates"]))
    if stage not in result["updates"]:
        raise SystemExit(f"{path} has no GRPO stage {stage!r}; it has {', '.join(result['updates'])}")
    return label or f"{Path(path).stem}:{stage}", {"updates": result["updates"][stage], "curve": result["curves"][stage]}


UPDATE_KEYS = ("step", "entropy", "grad_norm", "learning_rate", "off_policy_mask/dropped_of_negative")


def update(logged: dict) -> dict:
    """One optimizer step's row. An update that trained on no token (every group left out by the
    zero-spread filter: gradient norm 0) has no entropy; trainers before session 35 logged 0.0 for
    it, which would plot as a collapse. Gradient norm 0 with a measured entropy (the filter off and
    every advantage 0) keeps it."""
    row = {k: logged.get(k) for k in UPDATE_KEYS}
    if row["grad_norm"] == 0.0 and row["entropy"] == 0.0:
        row["entropy"] = None
    return row


def summary(runs: dict[str, dict], steps: int) -> dict:
    """The first ``steps`` updates of every run, and the generation batches drawn in them."""
    batches = {"reward": "reward", "at_cap": "completions/clipped_ratio", "zero_spread_filtered": "zero_spread/filtered_frac"}
    return {
        label: {
            "updates": [update(u) for u in run["updates"] if u["step"] <= steps],
            "batches": [{"step": c["step"], **{k: c.get(v) for k, v in batches.items()}} for c in run["curve"] if c["step"] <= steps],
        }
        for label, run in runs.items()
    }


def plot(table: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    masked = {label: run for label, run in table.items() if any(u["off_policy_mask/dropped_of_negative"] is not None for u in run["updates"])}
    fig, axes = plt.subplots(1, 4 if masked else 3, figsize=(21 if masked else 16, 4))
    reward, entropy, norm = axes[:3]
    # one colour (and, past the ten of the colour cycle, a dashed line) a run in every panel
    look = {label: {"color": f"C{i % 10}", "linestyle": "-" if i < 10 else "--"} for i, label in enumerate(table)}
    for label, run in table.items():
        steps, style = [u["step"] for u in run["updates"]], {"marker": ".", "label": label, **look[label]}
        reward.plot([b["step"] for b in run["batches"]], [b["reward"] for b in run["batches"]], **{**style, "marker": "o"})
        entropy.plot(steps, [math.nan if u["entropy"] is None else u["entropy"] for u in run["updates"]], **style)
        norm.plot(steps, [u["grad_norm"] or math.nan for u in run["updates"]], **style)  # 0: nothing trained (log axis)
        if label in masked:
            axes[3].plot(steps, [u["off_policy_mask/dropped_of_negative"] for u in run["updates"]], **style)
    if masked:
        axes[3].set(xlabel="optimizer step", ylabel="share of negative-advantage rollouts", title="dropped by the off-policy mask", ylim=(0, 1.05))
    reward.set(xlabel="step at which a generation batch was drawn", ylabel="mean reward of the batch", title="batch reward")
    entropy.set(xlabel="optimizer step", ylabel="mean token entropy on the batch's completions", title="policy entropy")
    norm.set(xlabel="optimizer step", ylabel="gradient norm before clipping to 1.0", title="gradient norm", yscale="log")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # one legend below the panels (a run has one colour in all of them): eight runs' legends in
    # each panel hid the curves
    legend_height = 0.22 * -(-len(table) // 4)  # inches: four runs to a row of 8-point text
    fig.set_figheight(4 + legend_height)
    fig.legend(*reward.get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, (legend_height + 0.1) / fig.get_figheight(), 1, 1))
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="FILE[:STAGE]=LABEL: a factorio_repro result file and its GRPO stage")
    p.add_argument("--steps", type=int, default=8, help="compare the first STEPS updates")
    p.add_argument("--title", default="factorio-build GRPO, update by update")
    p.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.png")
    a = p.parse_args(argv)
    table = summary(dict(load(run) for run in a.runs), a.steps)
    a.out.with_suffix(".json").write_text(json.dumps({"runs": a.runs, "steps": a.steps, "table": table}, indent=2) + "\n")
    plot(table, a.out.with_suffix(".png"), a.title)
    for label, run in table.items():
        print(f"{label}: batch reward {[b['reward'] for b in run['batches']]}, at cap {[b['at_cap'] for b in run['batches']]}, "
              f"entropy {[None if u['entropy'] is None else round(u['entropy'], 4) for u in run['updates']]}")


if __name__ == "__main__":
    main()
