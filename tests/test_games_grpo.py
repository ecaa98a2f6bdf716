"""Multi-turn GRPO on clembench-games through rlplugs' TRL episode rollout: 2 steps on one game with
the tiny Qwen3.5 (random weights, real tokenizer and chat template), CPU."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")


def test_tiny_model_grpo_runs_two_steps_on_referencegame_and_logs_every_component(tiny_qwen35, tmp_path):
    from trl import GRPOConfig

    from rlplugs.registry import get_environment
    from rlplugs.trl.rewards import EnvRewardFunctions
    from rlplugs.trl.rollout import make_episode_rollout
    from rlplugs.trl.trainer import EnvGRPOTrainer

    spec = get_environment("clembench-games", {"games": ["referencegame"], "seats": "single", "train_per_experiment": 1})
    rewards = EnvRewardFunctions(spec)
    args = GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, activation_checkpointing=False,
        per_device_train_batch_size=4, num_generations=4, max_completion_length=32,
        generation_kwargs={"max_new_tokens": 16}, chat_template_kwargs={"enable_thinking": False},
        max_steps=2, learning_rate=1e-4, logging_steps=1, report_to="none", save_strategy="no",
        reward_weights=rewards.weights,
    )  # fmt: skip
    trainer = EnvGRPOTrainer(model=str(tiny_qwen35), reward_funcs=rewards.functions, args=args,
                             train_dataset=spec.dataset("train"), rollout_func=make_episode_rollout(spec))
    trainer.train()
    steps = [h for h in trainer.state.log_history if "loss" in h]
    assert len(steps) == 2
    for h in steps:
        for name in ("main_score", "played", "success"):
            assert h[f"rewards/{name}/mean"] is not None
            assert h[f"unscored/{name}"] == 0.0  # aborted games are real zeros, never unscored
