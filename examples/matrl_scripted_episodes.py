"""Play matrl episodes with the scripted reference policy and print every reward component.

    python examples/matrl_scripted_episodes.py --reference_csv /path/to/mp_20/test.csv --rows 4 --rollouts 2

Shows the whole loop a trainer runs, without a model: dataset rows -> episodes (tool calls,
CHGNet relaxations) -> per-episode and group reward components, with unscored terms and reasons.
"""

from __future__ import annotations

import argparse
import sys

from rlplugs import check_counts
from rlplugs.episode import play
from rlplugs.registry import make_env
from rlplugs.rewards import Sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--band_gap_model", help="MatGL-format MEGNet folder (default: the shipped weights)")
    parser.add_argument("--reference_csv", help="MP-20-style CSV used as the novelty reference")
    parser.add_argument("--judge_url", help="a running `rlplugs matrl serve-judges`")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=2)
    args = parser.parse_args()
    check_counts(args, rows=1, rollouts=1)

    options = {"eval_rows": args.rows, "judge_url": args.judge_url}
    if args.band_gap_model:
        options["band_gap_model"] = args.band_gap_model
    if args.reference_csv:
        options["reference_csvs"] = [args.reference_csv]
    spec = make_env("matrl", options)
    samples = []
    for group, row in enumerate(spec.dataset("validation")):
        for _ in range(args.rollouts):
            episode = play(spec.episodes(row), spec.reference_policy)
            samples.append(Sample(prompt=row["prompt"], completion="", row=row, episode=episode, group=group))
    for sample, scores in zip(samples, spec.score(samples)):
        sub = sample.episode.submission or {}
        print(f"{sample.row['task_id']}: {sub.get('formula')} E_hull={sub.get('e_above_hull')}")
        for name, score in scores.items():
            print(f"    {name:20s} {score.value if score.scored else 'unscored: ' + str(score.reason)}")


if __name__ == "__main__":
    from rlplugs import run_script

    sys.exit(run_script(main))  # a fault is one line; RLPLUGS_TRACEBACK=1 shows its traceback
