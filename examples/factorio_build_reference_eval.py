"""Evaluate the scripted reference policy on factorio-build's validation and holdout splits.

The model card's protocol (16 rows x 4 samples x 8 unseen scenes per split, success = verified
scenes / all scenes, per family) through :func:`rlplugs.tools.evaluation.evaluate_to_dir`; writes
``report.json``, ``report.md`` and pictures of builds (with blueprint strings) and prints where.
The same as ``rlplugs eval --env factorio-build --policy reference --out DIR``.

    python examples/factorio_build_reference_eval.py --out outputs/factorio-build-eval
    python examples/factorio_build_reference_eval.py --rows 2 --samples 1   # a quick look
"""

from __future__ import annotations

import argparse
import logging
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="outputs/factorio-build-eval")
    parser.add_argument("--splits", nargs="+", default=["validation", "holdout"])
    parser.add_argument("--rows", type=int, help="rows per split (default: the protocol's 16)")
    parser.add_argument("--samples", type=int, help="samples per row (default: the protocol's 4)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from rlplugs import check_counts
    from rlplugs.tools.evaluation import evaluate_to_dir, protocol_overrides
    from rlplugs.registry import make_env

    check_counts(args, rows=1, samples=1)
    spec = make_env("factorio-build")
    protocol = protocol_overrides(spec.eval, rows=args.rows, samples_per_row=args.samples)
    report, path = evaluate_to_dir(
        spec, args.splits, spec.reference_policy, args.out, protocol=protocol, policy_name="reference", progress=True
    )
    sys.stdout.write(f"report: {path / 'report.md'}\n")


if __name__ == "__main__":
    from rlplugs import run_script

    sys.exit(run_script(main))  # a fault is one line; RLPLUGS_TRACEBACK=1 shows its traceback
