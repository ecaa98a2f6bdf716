#!/usr/bin/env bash
# Quickstart: install rlplugs into .venv, train factorio-build briefly with GRPO on the embedded
# tiny Qwen3.5 (CPU, offline), then evaluate the env's reference policy on the holdout split.
set -euo pipefail
cd "$(dirname "$0")/.."

export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [ ! -x .venv/bin/rlplugs ]; then
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q "torch==2.13.0"   # pinned CPU-capable build first, never an unpinned torch
    .venv/bin/pip install -q -e ".[dev]"
fi

# The embedded default model: a tiny Qwen3.5 built in code with the real Qwen3.5 tokenizer (cached).
model=$(.venv/bin/python -c "from rlplugs.testing.tiny_models import tiny_qwen35_dir; print(tiny_qwen35_dir())")
.venv/bin/rlplugs grpo --env factorio-build --config configs/trl/factorio-build-grpo-tiny.yaml \
    --model_name_or_path "$model" --output_dir runs/quickstart-grpo
.venv/bin/rlplugs eval --env factorio-build --split holdout --policy reference --out runs/quickstart-eval

echo
echo "GRPO checkpoint: runs/quickstart-grpo"
echo "  The tiny model has random weights: it writes no program, so its GRPO run scores 0 on every sample"
echo "  (rewards/success/mean 0), as expected. The reference eval below shows what a solved row scores."
echo "Evaluation report: runs/quickstart-eval/report.md (numbers in runs/quickstart-eval/report.json)"
