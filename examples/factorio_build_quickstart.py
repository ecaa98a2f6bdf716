"""The Quickstart's main job, offline on CPU: a short GRPO run on factorio-build with the embedded
tiny Qwen3.5, then the holdout eval with the reference policy; prints where the report is.

Two stock commands, run one after the other:

    rlplugs grpo --config configs/trl/factorio-build-grpo-tiny.yaml --model_name_or_path TINY --output_dir OUT/grpo
    rlplugs eval --env factorio-build --split holdout --policy reference --out OUT/eval

    python examples/factorio_build_quickstart.py --out outputs/quickstart
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY_MODEL_NOTE = (
    "The tiny model has random weights: it writes no program, so its GRPO run scores 0 on every sample "
    "(rewards/success/mean 0), as expected. The reference eval shows what a solved row scores."
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="outputs/quickstart")
    parser.add_argument("--steps", default="2")
    parser.add_argument("--eval_rows", help="holdout rows to evaluate (default: the protocol's 16)")
    args = parser.parse_args()

    from rlplugs.testing.tiny_models import tiny_qwen35_dir

    rlplugs = shutil.which("rlplugs") or str(Path(sys.executable).with_name("rlplugs"))
    out = Path(args.out)
    train = [
        rlplugs, "grpo", "--config", str(ROOT / "configs/trl/factorio-build-grpo-tiny.yaml"),
        "--model_name_or_path", str(tiny_qwen35_dir()), "--max_steps", args.steps, "--output_dir", str(out / "grpo"),
    ]  # fmt: skip
    evaluate = [rlplugs, "eval", "--env", "factorio-build", "--split", "holdout", "--policy", "reference",
                "--out", str(out / "eval"), *(["--rows", args.eval_rows] if args.eval_rows else [])]  # fmt: skip
    for command in (train, evaluate):
        sys.stdout.write("$ " + " ".join(command) + "\n")
        sys.stdout.flush()
        if subprocess.run(command).returncode != 0:
            return 1
    sys.stdout.write(
        f"trained adapter: {out / 'grpo'}\n{TINY_MODEL_NOTE}\nholdout report: {out / 'eval' / 'report.md'}\n"
    )
    return 0


if __name__ == "__main__":
    from rlplugs import run_script

    sys.exit(run_script(main))  # a fault is one line; RLPLUGS_TRACEBACK=1 shows its traceback
