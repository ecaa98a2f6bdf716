"""Fresh-optimizer resume and segment bookkeeping with a real transformers Trainer on the tiny Qwen3.5.

Every run trains on the same 16 rows (row ``i`` starts with token ``1000 + i``, so the recorded
first tokens give the data order) with attention dropout on, so RNG continuity matters too.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from rlplugs.builtins.checkpoint.resume import MARKER, strip_optimizer
from rlplugs.builtins.checkpoint.segments import SEGMENTS_FILE, SegmentLog
from rlplugs.registry import get_registry

LR = 1e-3


class RecordingCollator:
    """transformers' default collator, remembering each batch's row ids (first tokens)."""

    def __init__(self):
        from transformers import default_data_collator

        self.collate = default_data_collator
        self.rows: list[list[int]] = []

    def __call__(self, features):
        batch = self.collate(features)
        self.rows.append(batch["input_ids"][:, 0].tolist())
        return batch

    def trained(self, steps: int) -> list[list[int]]:
        """The batches of the first ``steps`` steps (accelerate's loader collates one batch ahead)."""
        return self.rows[:steps]


def _dataset():
    from datasets import Dataset

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (16, 12), generator=g)
    ids[:, 0] = torch.arange(1000, 1016)
    return Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})


def _model(model_dir: Path, lora: bool):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attention_dropout=0.2)
    if lora:
        from peft import LoraConfig, get_peft_model

        from rlplugs.qwen35 import QWEN35_LORA_TARGETS

        model = get_peft_model(
            model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=QWEN35_LORA_TARGETS)
        )
    return model


def _ckpt_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlplugs")
    get_registry().add_cli_commands(parser.add_subparsers(dest="command"))
    return parser


def _fixup_callback(name: str, args):
    return get_registry().get("checkpoint_fixup", name).build({}).trainer_callback(args)


def _train(model_dir, out, optim, max_steps, resume=None, lora=False, fixups=("segments",), adam_epsilon=1e-8):
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=2, learning_rate=LR,
        lr_scheduler_type="linear", warmup_steps=1, optim=optim, weight_decay=0.0, save_steps=2,
        logging_steps=1, seed=0, use_cpu=True, report_to="none", disable_tqdm=True,
        adam_epsilon=adam_epsilon, resume_from_checkpoint=str(resume) if resume else None,
    )  # fmt: skip
    collator = RecordingCollator()
    trainer = Trainer(
        model=_model(model_dir, lora), args=args, train_dataset=_dataset(), data_collator=collator,
        callbacks=[_fixup_callback(name, args) for name in fixups],
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    by_step = {h["step"]: h for h in trainer.state.log_history if "loss" in h}
    weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    return trainer, collator, by_step, weights


@pytest.fixture(scope="module")
def sgd_runs(tmp_path_factory, tiny_qwen35):
    """An uninterrupted 4-step SGD run, then the same run resumed from step 2 with a fresh optimizer
    in the same output folder, as a restart after a lost optimizer state would be."""
    out = tmp_path_factory.mktemp("sgd") / "run"
    full = _train(tiny_qwen35, out, "sgd", 4)
    args = _ckpt_parser().parse_args(["ckpt", "strip-optimizer", str(out / "checkpoint-2")])
    assert args.func(args) == 0
    stripped = out / "checkpoint-2-fresh-optimizer"
    resumed = _train(tiny_qwen35, out, "sgd", 4, resume=stripped, fixups=("fresh-optimizer-resume", "segments"))
    return out, stripped, full, resumed


def test_strip_optimizer_drops_only_the_optimizer_state(sgd_runs):
    out, stripped, _, _ = sgd_runs
    assert (out / "checkpoint-2" / "optimizer.pt").exists()
    original = {p.name for p in (out / "checkpoint-2").iterdir()}
    assert {p.name for p in stripped.iterdir()} == original - {"optimizer.pt"} | {MARKER}
    assert (stripped / "scheduler.pt").exists() and (stripped / "rng_state.pth").exists()


def test_sgd_resume_with_fresh_optimizer_matches_the_uninterrupted_run_bit_for_bit(sgd_runs):
    """SGD without momentum has no state, so a fresh optimizer loses nothing: step count, LR
    schedule, data order, dropout RNG and weights all continue exactly."""
    _, _, (_, rows_full, log_full, w_full), (trainer, rows_res, log_res, w_res) = sgd_runs
    assert trainer.state.global_step == 4 and sorted(log_res) == [1, 2, 3, 4]  # 1-2 from the checkpoint
    assert rows_res.trained(2) == rows_full.trained(4)[2:]
    for step in (3, 4):
        assert log_res[step]["learning_rate"] == log_full[step]["learning_rate"]
        assert log_res[step]["loss"] == log_full[step]["loss"]
    assert w_res.keys() == w_full.keys()
    assert all(torch.equal(w_res[n], w_full[n]) for n in w_full)


def test_resume_from_weights_without_the_callback_restarts_the_lr_schedule(sgd_runs, tiny_qwen35, tmp_path):
    """The negative control: Trainer skips scheduler.pt when optimizer.pt is absent."""
    _, stripped, (_, _, log_full, _), _ = sgd_runs
    _, _, log_plain, _ = _train(tiny_qwen35, tmp_path, "sgd", 3, resume=stripped, fixups=())
    assert log_plain[3]["learning_rate"] != log_full[3]["learning_rate"]


def test_segments_record_the_fresh_optimizer_restart_and_print_the_chain(sgd_runs, capsys):
    out, stripped, _, _ = sgd_runs
    first, second = SegmentLog(out).segments
    assert (first.start_step, first.end_step, first.end_reason, first.optimizer_carried) == (0, 4, "completed", False)
    assert (second.start_step, second.end_step, second.end_reason, second.optimizer_carried) == (
        2,
        4,
        "completed",
        False,
    )
    assert second.resumed_from == str(stripped)

    args = _ckpt_parser().parse_args(["ckpt", "segments", str(out)])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "0 → 4" in printed and "2 → 4" in printed and "fresh" in printed and "completed" in printed


def test_segment_left_open_by_a_crash_is_closed_as_interrupted_by_the_next_one(tmp_path, capsys):
    """prime-rl has no hooks: its launcher records segments through the CLI."""
    parser = _ckpt_parser()

    def run(*argv):
        args = parser.parse_args(["ckpt", "segments", str(tmp_path), *argv])
        return args.func(args)

    assert run("--begin", "0", "--fresh-optimizer") == 0
    SegmentLog(tmp_path).heartbeat(25)  # a checkpoint at step 25, then the process dies
    assert run("--begin", "25", "--fresh-optimizer", "--resumed-from", "checkpoints/step_25") == 0
    assert run("--end", "40", "--reason", "guard: bf16 no-op") == 0
    crashed, resumed = SegmentLog(tmp_path).segments
    assert crashed.end_step == 25 and crashed.end_reason.startswith("interrupted")
    assert (resumed.start_step, resumed.end_step, resumed.end_reason) == (25, 40, "guard: bf16 no-op")
    assert run("--end", "41") == 2  # nothing open
    assert "no open segment" in capsys.readouterr().err
    assert (tmp_path / SEGMENTS_FILE).exists()


@pytest.fixture(scope="module")
def adam_runs(tmp_path_factory, tiny_qwen35):
    """AdamW with eps 1e-12, far below every gradient, so the fresh first step is exactly lr * sign(g).
    Step 3 is re-run from checkpoint-2 three ways: weights only + fresh optimizer, the full
    checkpoint + fresh optimizer (the callback clears the loaded state), and a plain resume."""
    out = tmp_path_factory.mktemp("adam") / "run"
    full = _train(tiny_qwen35, out, "adamw_torch", 3, adam_epsilon=1e-12)
    stripped = strip_optimizer(out / "checkpoint-2")

    def resume(name, checkpoint, fixups):
        return _train(tiny_qwen35, tmp_path_factory.mktemp(name), "adamw_torch", 3, resume=checkpoint,
                      fixups=fixups, adam_epsilon=1e-12)  # fmt: skip

    resumed = resume("stripped", stripped, ("fresh-optimizer-resume",))
    cleared = resume("cleared", out / "checkpoint-2", ("fresh-optimizer-resume", "segments"))
    carried = resume("carried", out / "checkpoint-2", ("segments",))
    return out, full, resumed, cleared, carried


def test_adam_first_step_after_fresh_resume_is_sign_like_where_carried_moments_are_not(adam_runs):
    """What a fresh AdamW state changes: with zero moments the first update is
    ``lr * g / (|g| + eps)``, i.e. exactly ``lr`` per element here; the uninterrupted run's step-3
    update ``lr * m_hat / (sqrt(v_hat) + eps)`` mixes in steps 1-2 and is mostly smaller. Step
    count, LR and data order are unchanged."""
    from safetensors.torch import load_file

    out, (_, rows_full, log_full, w_full), (trainer, rows_res, log_res, w_res), *_ = adam_runs
    assert trainer.state.global_step == 3 and rows_res.trained(1) == rows_full.trained(3)[2:]
    lr3 = log_full[3]["learning_rate"]
    assert log_res[3]["learning_rate"] == lr3 > 0

    w2 = load_file(out / "checkpoint-2" / "model.safetensors")
    w2 = {n: w2.get(n, w2.get("model.embed_tokens.weight")) for n in w_full}  # lm_head is tied
    step_res = torch.cat([(w_res[n] - w2[n]).abs().flatten() for n in w_full])
    step_full = torch.cat([(w_full[n] - w2[n]).abs().flatten() for n in w_full])
    assert not torch.equal(step_res, step_full)
    assert step_res.max() <= lr3 * (1 + 1e-3)

    def share_at_lr(step):
        moved = step[step > 0]
        return ((moved - lr3).abs() <= 1e-3 * lr3).float().mean().item()

    assert share_at_lr(step_res) > 0.99
    assert share_at_lr(step_full) < 0.5


def test_fresh_resume_from_a_full_checkpoint_clears_the_loaded_adam_state(adam_runs):
    """Same result as resuming from the weights-only copy, bit for bit; the segment says fresh."""
    from rlplugs.builtins.checkpoint.resume import FreshOptimizerCallback

    _, _, (_, _, _, w_stripped), (trainer, _, _, w_cleared), _ = adam_runs
    (callback,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, FreshOptimizerCallback)]
    assert callback.cleared_states > 0
    assert all(torch.equal(w_cleared[n], w_stripped[n]) for n in w_stripped)
    (segment,) = SegmentLog(trainer.args.output_dir).segments
    assert (segment.start_step, segment.optimizer_carried) == (2, False)


def test_plain_resume_is_recorded_as_optimizer_carried_and_matches_the_uninterrupted_run(adam_runs):
    _, (_, _, _, w_full), _, _, (trainer, _, _, w_carried) = adam_runs
    assert all(torch.equal(w_carried[n], w_full[n]) for n in w_full)
    (segment,) = SegmentLog(trainer.args.output_dir).segments
    assert (segment.start_step, segment.end_step, segment.optimizer_carried) == (2, 3, True)


def test_lora_adapter_resume_with_fresh_sgd_matches_the_uninterrupted_run(tmp_path, tiny_qwen35):
    out = tmp_path / "run"
    _, rows_full, log_full, w_full = _train(tiny_qwen35, out, "sgd", 4, lora=True)
    assert (out / "checkpoint-2" / "adapter_model.safetensors").exists()
    stripped = strip_optimizer(out / "checkpoint-2")
    trainer, rows_res, log_res, w_res = _train(
        tiny_qwen35, tmp_path / "resumed", "sgd", 4, resume=stripped, lora=True, fixups=("fresh-optimizer-resume",)
    )
    assert trainer.state.global_step == 4 and rows_res.trained(2) == rows_full.trained(4)[2:]
    assert [log_res[s]["learning_rate"] for s in (3, 4)] == [log_full[s]["learning_rate"] for s in (3, 4)]
    assert w_res.keys() == w_full.keys() and all("lora_" in n for n in w_full)
    assert all(torch.equal(w_res[n], w_full[n]) for n in w_full)
