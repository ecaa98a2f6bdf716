"""Truncation monitor and entropy guard as callbacks on TRL's GRPOTrainer with the tiny Qwen3.5
and real tokenizer.

The random model never says ``<|im_end|>`` on its own, so with a 4-token limit every completion
is clipped; forcing EOS as the last generated token (``forced_eos_token_id``) makes none clipped.
Its token entropy is close to the log of the vocabulary's size, which cannot double.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from rlplugs.builtins.checkpoint.segments import SegmentLog
from rlplugs.builtins.checkpoint.truncation import TRUNCATION_FILE
from rlplugs.registry import get_registry


def _never_scored(prompts, completions, **kwargs):
    return [0.0] * len(completions)


def _grpo(model_dir, out, generation_kwargs=None, fixups=None, **settings):
    """A GRPO run of 2 steps (``settings`` change it) with the fixups ``{name: options}`` attached
    (by default the truncation monitor at 25%); returns the trainer and the callbacks by name."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(**{
        "output_dir": str(out), "max_steps": 2, "per_device_train_batch_size": 2, "num_generations": 2,
        "max_completion_length": 4, "logging_steps": 1, "learning_rate": 1e-5, "seed": 0, "use_cpu": True,
        "bf16": False, "report_to": "none", "save_strategy": "no", "disable_tqdm": True,
        "generation_kwargs": generation_kwargs, **settings,
    })  # fmt: skip
    callbacks = {
        name: get_registry().get("checkpoint_fixup", name).build(options).trainer_callback(args, SimpleNamespace(name="toy-env"))
        for name, options in (fixups or {"truncation-monitor": {"threshold": 0.25}}).items()
    }
    rows = [{"prompt": [{"role": "user", "content": f"Count to {i}."}]} for i in range(4)]
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), reward_funcs=_never_scored,
        args=args, train_dataset=Dataset.from_list(rows), processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=list(callbacks.values()),
    )  # fmt: skip
    trainer.train()
    return trainer, callbacks


def test_clipped_share_is_logged_every_step_and_warned_above_threshold(tiny_qwen35, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rlplugs.builtins.checkpoint.truncation"):
        _, callbacks = _grpo(tiny_qwen35, tmp_path)
    monitor = callbacks["truncation-monitor"]
    assert monitor.history == [(1, 1.0), (2, 1.0)]
    records = [json.loads(line) for line in (tmp_path / TRUNCATION_FILE).read_text().splitlines()]
    assert records == [{"step": s, "env": "toy-env", "clipped_ratio": 1.0} for s in (1, 2)]
    assert len(monitor.warnings) == 1  # warned on crossing, not on every step above
    assert "truncation[toy-env]: 100.0% of completions were clipped" in monitor.warnings[0]
    assert [r.message for r in caplog.records if r.name == "rlplugs.builtins.checkpoint.truncation"] == monitor.warnings


def test_completions_ending_in_eos_are_not_warned_about(tiny_qwen35, tmp_path):
    from transformers import AutoTokenizer

    eos = AutoTokenizer.from_pretrained(tiny_qwen35).eos_token_id
    monitor = _grpo(tiny_qwen35, tmp_path, {"forced_eos_token_id": eos})[1]["truncation-monitor"]
    assert monitor.history == [(1, 0.0), (2, 0.0)]
    assert monitor.warnings == []


@pytest.mark.parametrize("shares, warned_at", [([0.016, 0.05, None, 0.38, 0.4, 0.1, 0.3], [4, 7])])
def test_warning_repeats_only_after_the_share_falls_back_below_threshold(tmp_path, shares, warned_at):
    """The card's run: 1.6% clipped at the start, 38% later; an entry with no valid share (None) is skipped."""
    monitor = (
        get_registry().get("checkpoint_fixup", "truncation-monitor").build({"threshold": 0.2}).trainer_callback(None)
    )
    args = SimpleNamespace(output_dir=str(tmp_path))
    for step, share in enumerate(shares, 1):
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        monitor.on_log(args, state, None, logs={"completions/clipped_ratio": share, "loss": 0.1})
    assert [int(w.split("at step ")[1].split(" ")[0]) for w in monitor.warnings] == warned_at
    assert [step for step, _ in monitor.history] == [step for step, share in enumerate(shares, 1) if share is not None]
    assert "1.6% at step 1" in monitor.warnings[0] and "38.0%" in monitor.warnings[0]
    assert "truncation[default]" in monitor.warnings[0]


def test_entropy_guard_reads_every_step_and_leaves_a_steady_run_alone(tiny_qwen35, tmp_path):
    trainer, callbacks = _grpo(tiny_qwen35, tmp_path, fixups={"entropy-guard": {}})
    guard = callbacks["entropy-guard"]
    assert [step for step, _ in guard.history] == [1, 2] and all(value > 5 for _, value in guard.history)
    assert guard.tripped is None and trainer.state.global_step == 2


def test_entropy_guard_stops_at_the_first_entry_past_its_ratio_and_records_why(tiny_qwen35, tmp_path, caplog):
    """The stop itself, on a real trainer: watching the learning rate of a 4-step warm-up, which
    rises deterministically (the entropy of a random model does not)."""
    fixups = {"entropy-guard": {"metric": "learning_rate", "baseline_steps": 2}, "segments": {}}
    with caplog.at_level(logging.ERROR, logger="rlplugs.builtins.checkpoint.entropy"):
        trainer, callbacks = _grpo(tiny_qwen35, tmp_path, fixups=fixups, max_steps=6, warmup_steps=4)
    rates = [value for _, value in callbacks["entropy-guard"].history]
    assert rates[-1] > 1.6 * (rates[0] + rates[1]) / 2 >= max(rates[2:-1], default=0)  # the first entry past 1.6x after the 2 early ones
    assert trainer.state.global_step == len(rates) < 6
    reason = callbacks["entropy-guard"].tripped
    assert f"rose to {rates[-1]:.4g} at step {len(rates)}" in reason and "limit 1.6x" in reason
    assert [r.message for r in caplog.records] == [f"entropy-guard stopped training: {reason}"]
    (segment,) = SegmentLog(tmp_path).segments
    assert segment.end_step == len(rates) and segment.end_reason == f"stopped: entropy-guard: {reason}"


@pytest.mark.parametrize(("entropies", "stopped_at"), [
    ([0.0276, 0.0328, 0.0328, 0.0365, 0.0585, 0.0702, 0.0743, 0.0711], 5),  # session 25's top_p 0.9 phase: broke
    ([0.0286, 0.0315, 0.0283, 0.0313, 0.0102, 0.0100, 0.0102, 0.0101], None),  # session 23's: sharpened
    ([0.0891, 0.0940, 0.0774, 0.0810, 0.0618, 0.0638, 0.0767, 0.0809], None),  # session 18's, top_p 1.0: +16.2 points
    ([0.0332, 0.0227, 0.0251, 0.0294, 0.0565, 0.0512, 0.0550, 0.0522], 5),  # session 27's masked phase, seed 1: broke, < 2x
    ([0.0267, 0.0330, 0.0292, 0.0307, 0.0081, 0.0080, 0.0064, 0.0065], None),  # session 27's, seed 42: +31.6 points
    ([0.0411, 0.0446, 0.0440, 0.0372, 0.0405, 0.0424, 0.0365, 0.0367, 0.0394, 0.0383, 0.0331, 0.0451, 0.0493, 0.0414,
      0.0411, 0.0451, 0.0463, 0.0537, 0.0498, 0.0597], None),  # its resumed top_p 1.0 phase: up to 1.45x, held +25.1
    ([0.0317, 0.0335, 0.0355, 0.0348, 0.0035, 0.0037, 0.0040, 0.0036], None),  # session 34's, seed 2 (H100): +28.2 points
    ([0.0384, 0.0358, 0.0376, 0.0473, 0.0389, 0.0330, 0.0361, 0.0354, 0.0299, 0.0302, 0.0367, 0.0371], None),  # its phase 2: batches rose
])  # fmt: skip
def test_entropy_guard_tells_the_logged_runs_that_broke_from_those_that_did_not(entropies, stopped_at):
    """The per-update entropies of factorio-build GRPO runs on an H200 or an H100 (benchmarks/results)."""
    from transformers import TrainerControl, TrainerState

    guard = get_registry().get("checkpoint_fixup", "entropy-guard").build().trainer_callback(None)
    state, control = TrainerState(), TrainerControl()
    for step, entropy in enumerate(entropies, 1):
        state.global_step = step
        guard.on_log(None, state, control, logs={"loss": 0.1, "entropy": entropy, "grad_norm": 0.2})
        if control.should_training_stop:
            break
    assert (state.global_step if control.should_training_stop else None) == stopped_at
    assert [h["step"] for h in state.log_history] == ([stopped_at] if stopped_at else [])


@pytest.mark.parametrize(("logging_steps", "entries"), [(1, [1, 2]), (2, [2, 4])])
def test_no_spread_stop_ends_a_run_whose_batches_all_score_alike_and_records_why(tiny_qwen35, tmp_path, caplog, logging_steps, entries):
    """Every reward is 0, so no group of any batch has spread: the run stops at the second log
    entry. Logged every step, that is the second batch; logged every second step, each entry
    averages two batches and the stop comes at the fourth, later and never earlier."""
    fixups = {"no-spread-stop": {}, "segments": {}}
    with caplog.at_level(logging.WARNING, logger="rlplugs.builtins.checkpoint.spread"):
        trainer, callbacks = _grpo(tiny_qwen35, tmp_path, fixups=fixups, max_steps=8, logging_steps=logging_steps)
    stop = callbacks["no-spread-stop"]
    assert trainer.state.global_step == entries[-1] and stop.without_spread == entries
    assert f"logged at steps {entries[0]}, {entries[1]} (frac_reward_zero_std 1.0 in 2 log entries in a row)" in stop.tripped
    warned = [r.message for r in caplog.records if r.name == "rlplugs.builtins.checkpoint.spread"]
    assert warned == [f"no-spread-stop stopped training: {stop.tripped}"]
    (segment,) = SegmentLog(tmp_path).segments
    assert segment.end_step == entries[-1] and segment.end_reason == f"stopped: no-spread-stop: {stop.tripped}"


@pytest.mark.parametrize(("batches", "stopped_at"), [
    ({1: 0.0, 5: 0.3125, 9: 1.0, 13: 1.0, 17: 1.0}, 13),  # session 36's seed 2 at top_p 0.9: one program, 12 idle updates
    ({1: 0.0, 5: 1.0}, None),  # session 35's seed 3: one batch without spread, then the run's last update
    ({1: 0.0, 5: 0.5625, 9: 0.625, 13: 0.0, 17: 0.96875}, None),  # session 23's: spread came back
    ({1: 1.0, 5: 0.25, 9: 1.0}, None),  # not in a row
])  # fmt: skip
def test_no_spread_stop_counts_only_batches_in_a_row(batches, stopped_at):
    """Logged runs replayed update by update: the share appears only at the steps that drew a batch."""
    from transformers import TrainerControl, TrainerState

    stop = get_registry().get("checkpoint_fixup", "no-spread-stop").build().trainer_callback(None)
    state, control = TrainerState(), TrainerControl()
    for step in range(1, 21):
        state.global_step = step
        logs = {"loss": 0.0, "frac_reward_zero_std": batches[step]} if step in batches else {"loss": 0.0}
        stop.on_log(None, state, control, logs=logs)
        if control.should_training_stop:
            break
    assert (state.global_step if control.should_training_stop else None) == stopped_at
