"""``trl grpo --env ... --deepspeed CONFIG`` with the zero-spread filter, one process on the CPU
(DeepSpeed's CPU accelerator, ZeRO stage 0 or 2; stage 2 on two ranks too), as a user runs it; and
``trl sft`` under DeepSpeed.

Every update here has no token in the loss: the candidates are sampled at temperature 1e-4, so a
group's four completions are alike and so are their rewards. With the optimizer the trainer makes
(the config names none), its step is hooked and skips such updates: weight decay 0.1 would move
the weights otherwise, as it does in the last case. A config that defines its own optimizer leaves the trainer accelerate's
placeholder, which cannot be hooked: the run trains, warns once that such updates still step, and
the weights move. Before this test both crashed: the hook was put on the placeholder, and the
forward skipped for an update without tokens gave DeepSpeed a loss without a graph, which it refuses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_trl_cli import TINY_RUN, log_history, trl

pytest.importorskip("deepspeed")

UNHOOKED = "the trainer could not hook this optimizer (a DeepSpeed config that defines its own)"
CONFIGS = {  # ZeRO stage 2 steps the trainer's optimizer on flat partitions of the weights, not on the weights
    "trainer_optimizer": {"zero_optimization": {"stage": 0}},
    "trainer_optimizer_zero2": {"zero_optimization": {"stage": 2}},
    "config_optimizer": {"zero_optimization": {"stage": 0},
                         "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "torch_adam": True}}},
}


def write_config(folder: Path, name: str) -> Path:
    """The DeepSpeed config ``CONFIGS[name]``, its batch sizes taken from the training arguments."""
    path = folder / "ds.json"
    sizes = dict.fromkeys(("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"), "auto")
    path.write_text(json.dumps({**sizes, **CONFIGS[name]}))
    return path


# two ranks (gloo): every rank must take the same path through the forward and the skipped step, or one waits forever;
# with the config's own optimizer the warning still comes once, not once a rank
@pytest.mark.parametrize(("config", "processes"),
                         [*((name, 1) for name in CONFIGS), ("trainer_optimizer_zero2", 2), ("config_optimizer", 2)])
def test_updates_without_tokens_skip_the_trainers_optimizer_and_warn_of_a_configs_own(config, processes, tmp_path, tiny_qwen35,
                                                                                       plugin_env):  # fmt: skip
    ds_config = write_config(tmp_path, config)
    out = tmp_path / "out"
    launch = ["--num_processes", str(processes), *(["--multi_gpu"] if processes > 1 else [])]
    proc = trl(
        "grpo", "--env", "letters-test", "--model_name_or_path", str(tiny_qwen35), "--max_steps", "2",
        *launch, "--output_dir", str(out), "--deepspeed", str(ds_config),
        "--filter_zero_spread_groups", "true", "--temperature", "0.0001", "--learning_rate", "0.1",
        "--weight_decay", "0.1", *TINY_RUN,
        env=plugin_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    steps = [h for h in log_history(out) if "loss" in h]
    assert [h["zero_spread/filtered_frac"] for h in steps] == [1.0, 1.0]  # no update had a token
    before, after = load_file(tiny_qwen35 / "model.safetensors"), load_file(out / "model.safetensors")
    moved = sum(not torch.equal(after[name], weight) for name, weight in before.items())
    warnings = proc.stderr.count(UNHOOKED)
    if config.startswith("trainer_optimizer"):
        assert (moved, warnings) == (0, 0)
    else:
        assert moved > len(before) // 2 and warnings == 1


def test_trl_sft_under_deepspeed_trains_one_process(tmp_path, tiny_qwen35, plugin_env):
    """``trl sft`` starts its lone process the same way: rank variables given, no MPI asked."""
    ds_config = write_config(tmp_path, "trainer_optimizer_zero2")
    out = tmp_path / "out"
    proc = trl(
        "sft", "--env", "clembench-games", "--sft_dataset", "scripted-wins", "--model_name_or_path", str(tiny_qwen35),
        "--max_steps", "1", "--num_processes", "1", "--output_dir", str(out), "--deepspeed", str(ds_config),
        "--use_cpu", "--bf16", "false", "--per_device_train_batch_size", "2", "--max_length", "128",
        "--report_to", "none", "--gradient_checkpointing", "false",
        env=plugin_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    final = json.loads((out / "trainer_state.json").read_text())["log_history"][-1]
    assert final["train_loss"] > 0 and (out / "model.safetensors").exists()
