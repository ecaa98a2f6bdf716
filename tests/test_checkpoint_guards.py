"""bf16 no-op guard and the fp32-run final export, as callbacks on a real Trainer and tiny Qwen3.5."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from rlplugs.builtins.checkpoint.segments import SegmentLog
from rlplugs.registry import get_registry

LR = 1e-6


def _dataset():
    from datasets import Dataset

    ids = torch.randint(0, 5000, (8, 16), generator=torch.Generator().manual_seed(0)).tolist()
    return Dataset.from_dict({"input_ids": ids, "labels": ids})


def _run(model_dir, out, dtype, fixups: dict[str, dict], max_steps):
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=2, learning_rate=LR,
        lr_scheduler_type="constant", optim="adamw_torch", save_strategy="no", logging_steps=1, seed=0,
        use_cpu=True, bf16=False, report_to="none", disable_tqdm=True,
    )  # fmt: skip
    callbacks = {
        name: get_registry().get("checkpoint_fixup", name).build(options).trainer_callback(args)
        for name, options in fixups.items()
    }
    trainer = Trainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype), args=args, train_dataset=_dataset(),
        processing_class=AutoTokenizer.from_pretrained(model_dir), callbacks=list(callbacks.values()),
    )  # fmt: skip
    trainer.train()
    return trainer, callbacks


def test_bf16_weights_with_adamw_at_lr_1e6_trip_the_guard_naming_cause_and_fix(tiny_qwen35, tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="rlplugs.builtins.checkpoint.guards"):
        trainer, cbs = _run(
            tiny_qwen35, tmp_path, torch.bfloat16, {"bf16-noop-guard": {"check_steps": 2}, "segments": {}}, 6
        )
    guard = cbs["bf16-noop-guard"]
    assert trainer.state.global_step == 2  # stopped right after judging, 4 steps early
    assert guard.changed_fraction < 0.1
    assert "bfloat16" in guard.tripped and "round away" in guard.tripped and "fp32 master weights" in guard.tripped
    assert any("bf16-noop-guard stopped training" in r.message for r in caplog.records)
    (segment,) = SegmentLog(tmp_path).segments
    assert segment.end_step == 2 and segment.end_reason.startswith("stopped: bf16-noop-guard")


@pytest.fixture(scope="module")
def fp32_run(tiny_qwen35, tmp_path_factory):
    out = tmp_path_factory.mktemp("fp32")
    fixups = {"bf16-noop-guard": {"check_steps": 2}, "fix-dtype": {"dtype": "bfloat16"}}
    trainer, cbs = _run(tiny_qwen35, out, torch.float32, fixups, 3)
    return out, trainer, cbs


def test_fp32_master_weights_at_the_same_lr_do_not_trip_the_guard(fp32_run):
    _, trainer, cbs = fp32_run
    guard = cbs["bf16-noop-guard"]
    assert trainer.state.global_step == 3 and guard.tripped is None
    assert guard.changed_fraction > 0.9


def test_fp32_run_final_export_is_written_in_bf16(fp32_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, trainer, cbs = fp32_run
    export = out / "export-bfloat16"
    assert cbs["fix-dtype"].report.tensors_cast > 0
    assert json.loads((export / "config.json").read_text())["dtype"] == "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(export, dtype="auto")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    trained = dict(trainer.model.named_parameters())
    for name, p in model.named_parameters():
        assert torch.equal(p, trained[name].detach().to(torch.bfloat16)), name
    assert AutoTokenizer.from_pretrained(export).eos_token == "<|im_end|>"
