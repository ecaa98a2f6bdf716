"""SFT on an environment's SFT dataset through rlplugs' SFT script (in-process, tiny Qwen3.5)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from datasets import Dataset

from rlplugs.registry import make_env
from rlplugs.adapters.trl import sft
from rlplugs.adapters.trl.arguments import make_sft_parser


def demonstrations() -> Dataset:
    chat = [{"role": "user", "content": "Write a word."}, {"role": "assistant", "content": "apple"}]
    return Dataset.from_list([{"messages": chat}] * 8)


def parse(tmp_path, model, *extra: str):
    argv = [
        "--env", "letters-test", "--model_name_or_path", str(model), "--output_dir", str(tmp_path / "out"),
        "--use_cpu", "--bf16", "false", "--max_steps", "2", "--per_device_train_batch_size", "4", "--max_length", "64",
        "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1", "--gradient_checkpointing", "false",
        *extra,
    ]  # fmt: skip
    return make_sft_parser().parse_args_and_config(argv)


def test_sft_trains_on_the_environments_sft_dataset(tmp_path, tiny_qwen35):
    script_args, training_args, model_args, dataset_args = parse(tmp_path, tiny_qwen35, "--sft_dataset", "demo")
    spec = dataclasses.replace(make_env("letters-test"), sft_datasets={"other": list, "demo": demonstrations})
    sft.main(script_args, training_args, model_args, dataset_args, spec)
    assert (tmp_path / "out" / "model.safetensors").exists()
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForCausalLM"]


def test_sft_without_an_sft_dataset_says_so(tmp_path, tiny_qwen35):
    script_args, training_args, model_args, dataset_args = parse(tmp_path, tiny_qwen35)
    with pytest.raises(KeyError, match="env 'letters-test' has no SFT dataset"):
        sft.main(script_args, training_args, model_args, dataset_args, make_env("letters-test"))
