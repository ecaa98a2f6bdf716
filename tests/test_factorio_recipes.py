"""factorio-build recipes and adapters: the TRL YAMLs, the prime-rl TOML, and verifiers' own loader
and rollout path scoring real programs. (The literal ``trl grpo`` runs of the YAMLs on the tiny model
are in the acceptance matrix, tests/test_acceptance.py.)"""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

from factorio_build import reference
from rlplugs.qwen35 import QWEN35_LORA_TARGETS
from rlplugs.adapters.trl.arguments import make_grpo_parser, make_sft_parser, parse_with_env_defaults

ROOT = Path(__file__).resolve().parents[1]


def test_grpo_yaml_mirrors_the_card():
    (script, train, model, _), spec, *_ = parse_with_env_defaults(
        make_grpo_parser(), ["--config", str(ROOT / "configs/trl/factorio-build-grpo.yaml"), "--bf16", "false"]
    )
    assert spec.name == "factorio-build" and script.filter_zero_spread_groups
    assert train.num_generations == 16 and train.per_device_train_batch_size * train.gradient_accumulation_steps == 128
    assert (train.temperature, train.beta, train.max_completion_length, train.learning_rate) == (0.7, 0.0, 12288, 2e-5)
    assert train.chat_template_kwargs == {"enable_thinking": False}
    assert train.use_vllm and train.vllm_mode == "server"
    assert model.model_name_or_path == "Qwen/Qwen3.5-9B"
    assert (model.lora_r, model.lora_alpha, model.lora_target_modules) == (16, 32, QWEN35_LORA_TARGETS)


def test_sft_yaml_selects_a_warmstart_set():
    (script, train, _, _), spec, *_ = parse_with_env_defaults(
        make_sft_parser(), ["--config", str(ROOT / "configs/trl/factorio-build-sft.yaml"), "--bf16", "false"]
    )
    assert script.sft_dataset in spec.sft_datasets and train.assistant_only_loss


def test_prime_rl_toml_sources_validate_against_the_taskset_config():
    from verifiers.v1.utils import loaders

    config = tomllib.loads((ROOT / "configs/prime-rl/factorio-build.toml").read_text())
    orchestrator = config["orchestrator"]
    assert (orchestrator["group_size"], orchestrator["batch_size"]) == (16, 128)
    sources = orchestrator["train"]["source"] + orchestrator["eval"]["source"]
    config_type = loaders.taskset_config_type("factorio-build")
    for source in sources:
        taskset = source["env"]["taskset"]
        assert taskset["id"] == "factorio-build" and source["env"]["agent"]["runtime"]["type"] == "subprocess"
        config_type(**{**taskset, "eval_rows": 1, "rows": 1})  # unknown keys would raise here
    assert config["trainer"]["model"]["lora"]["target_modules"] == QWEN35_LORA_TARGETS


def test_verifiers_rollouts_score_real_programs_like_the_envspec(tmp_path, monkeypatch):
    """verifiers' own eval runner loads the taskset by id and scores what a scripted model says."""
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    from rlplugs.tools.policy_server import serve_policy

    monkeypatch.setenv("RLPLUGS_TEST_KEY", "local")
    env = {"taskset": {"id": "factorio-build", "split": "holdout", "eval_rows": 2, "rows": 1, "workers": 1},
           "agent": {"runtime": {"type": "subprocess"}}}
    with serve_policy(reference.reference_policy, idle_timeout_s=300) as server:
        config = EvalConfig(
            env=env, model="scripted", client={"base_url": server.base_url, "api_key_var": "RLPLUGS_TEST_KEY"},
            num_rollouts=1, push=False, rich=None, output_dir=tmp_path, select={"limit": 2},
        )
        episodes = asyncio.run(run_eval(config))
    assert len(episodes) == 2
    for episode in episodes:
        (trace,) = episode.traces
        assert trace.ok, trace.errors
        assert trace.rewards["success"].score == 1.0 and trace.rewards["validity"].score == 1.0
        assert trace.rewards["validity"].weight == 0.1
