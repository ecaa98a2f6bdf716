"""Truncation monitor as a callback on TRL's GRPOTrainer with the tiny Qwen3.5 and real tokenizer.

The random model never says ``<|im_end|>`` on its own, so with a 4-token limit every completion
is clipped; forcing EOS as the last generated token (``forced_eos_token_id``) makes none clipped.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from rlplugs.builtins.checkpoint.truncation import TRUNCATION_FILE
from rlplugs.registry import get_registry


def _never_scored(prompts, completions, **kwargs):
    return [0.0] * len(completions)


def _grpo(model_dir, out, generation_kwargs):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(out), max_steps=2, per_device_train_batch_size=2, num_generations=2, max_completion_length=4,
        logging_steps=1, learning_rate=1e-5, seed=0, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        disable_tqdm=True, generation_kwargs=generation_kwargs,
    )  # fmt: skip
    monitor = (
        get_registry().get("checkpoint_fixup", "truncation-monitor").build({"threshold": 0.25})
        .trainer_callback(args, SimpleNamespace(name="toy-env"))
    )  # fmt: skip
    rows = [{"prompt": [{"role": "user", "content": f"Count to {i}."}]} for i in range(4)]
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), reward_funcs=_never_scored,
        args=args, train_dataset=Dataset.from_list(rows), processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=[monitor],
    )  # fmt: skip
    trainer.train()
    return monitor


def test_clipped_share_is_logged_every_step_and_warned_above_threshold(tiny_qwen35, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rlplugs.builtins.checkpoint.truncation"):
        monitor = _grpo(tiny_qwen35, tmp_path, None)
    assert monitor.history == [(1, 1.0), (2, 1.0)]
    records = [json.loads(line) for line in (tmp_path / TRUNCATION_FILE).read_text().splitlines()]
    assert records == [{"step": s, "env": "toy-env", "clipped_ratio": 1.0} for s in (1, 2)]
    assert len(monitor.warnings) == 1  # warned on crossing, not on every step above
    assert "truncation[toy-env]: 100.0% of completions were clipped" in monitor.warnings[0]
    assert [r.message for r in caplog.records if r.name == "rlplugs.builtins.checkpoint.truncation"] == monitor.warnings


def test_completions_ending_in_eos_are_not_warned_about(tiny_qwen35, tmp_path):
    from transformers import AutoTokenizer

    eos = AutoTokenizer.from_pretrained(tiny_qwen35).eos_token_id
    monitor = _grpo(tiny_qwen35, tmp_path, {"forced_eos_token_id": eos})
    assert monitor.history == [(1, 0.0), (2, 0.0)]
    assert monitor.warnings == []


@pytest.mark.parametrize("shares, warned_at", [([0.016, 0.05, 0.38, 0.4, 0.1, 0.3], [3, 6])])
def test_warning_repeats_only_after_the_share_falls_back_below_threshold(tmp_path, shares, warned_at):
    """The card's run: 1.6% clipped at the start, 38% later."""
    monitor = (
        get_registry().get("checkpoint_fixup", "truncation-monitor").build({"threshold": 0.2}).trainer_callback(None)
    )
    args = SimpleNamespace(output_dir=str(tmp_path))
    for step, share in enumerate(shares, 1):
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        monitor.on_log(args, state, None, logs={"completions/clipped_ratio": share, "loss": 0.1})
    assert [int(w.split("at step ")[1].split(" ")[0]) for w in monitor.warnings] == warned_at
    assert "1.6% at step 1" in monitor.warnings[0] and "38.0%" in monitor.warnings[0]
    assert "truncation[default]" in monitor.warnings[0]
