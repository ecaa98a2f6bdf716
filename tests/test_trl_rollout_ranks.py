"""Multi-turn GRPO on two CPU ranks (gloo): every rank makes the same generation calls.

Under ZeRO-3 or FSDP every generation call is a collective (each forward gathers parameters), and
vLLM server mode gathers every rank's prompts into one request and slices the answer by each
rank's prompt count; so ranks must make the same number of calls per step, each with the same
number of contexts. Here the episodes on one rank end after one turn and those on the other after
four (``count-test`` with ``turns_by_start``): a rollout that stopped when its own episodes were
over would leave the other rank waiting in a collective.

accelerate enables FSDP only on accelerators (``AcceleratorState`` keeps ``MULTI_CPU`` for CPU
ranks, checked in accelerate 1.15), so on CPU the ranks run DDP and generate through the vLLM
server-mode stand-in (``tests/vllm_standin.py``), whose real gloo gather and broadcast impose
exactly that contract: a rank that skipped a call would hang, one with fewer contexts would get
another rank's answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from gloo_ranks import run_two_ranks

pytest.importorskip("trl")


def test_ranks_with_unequal_episodes_make_equal_generation_calls(tmp_path, tiny_qwen35, plugin_env):
    ranks = run_two_ranks(__file__, tmp_path, tiny_qwen35, env=plugin_env, timeout=600)
    # the two ranks played episodes of different lengths, to the end ...
    assert sorted(r["turns_played"] for r in ranks) == [[1] * 4, [4] * 4]
    # ... and still made the same calls, with the same number of contexts each, every step
    assert ranks[0]["calls"] == ranks[1]["calls"] == [[0, 2]] * 4 + [[1, 2]] * 4
    assert ranks[0]["syncs"] == ranks[1]["syncs"] == [0, 1]  # weights pushed once per step
    assert ranks[0]["unscored"] == ranks[1]["unscored"] == 0 and ranks[0]["steps"] == 2


def _worker(out_dir: str, model_dir: str) -> None:
    from trl import GRPOConfig
    from vllm_standin import StandInVLLM

    from rlplugs.adapters.trl.rewards import EnvRewardFunctions
    from rlplugs.adapters.trl.rollout import make_episode_rollout
    from rlplugs.adapters.trl.trainer import EnvGRPOTrainer
    from rlplugs.registry import make_env

    spec = make_env("count-test", {"rows": 2, "turns_by_start": {0: 1, 1: 4}})
    rewards = EnvRewardFunctions(spec)
    args = GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, gradient_checkpointing=False, per_device_train_batch_size=2,
        num_generations=2, max_completion_length=96, generation_kwargs={"max_tokens": 4}, max_steps=2,
        learning_rate=0.1, report_to="none", save_strategy="no", logging_steps=1, shuffle_dataset=False,
        chat_template_kwargs={"enable_thinking": False}, reward_weights=rewards.weights,
    )  # fmt: skip
    trainer = EnvGRPOTrainer(
        model=model_dir, reward_funcs=rewards.functions, args=args, train_dataset=spec.dataset("train"),
        rollout_func=make_episode_rollout(spec),
    )  # fmt: skip
    trainer.use_vllm, trainer._last_loaded_step = True, -1
    trainer.vllm_generation = backend = StandInVLLM(trainer, server=True)
    turns: list[int] = []
    rollout = trainer.rollout_func

    def recorded(prompts, t):
        out = rollout(prompts, t)
        turns.extend(len(ep.replies) for ep in out["episode"])
        return out

    trainer.rollout_func = recorded
    trainer.train()
    rank = trainer.accelerator.process_index
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({
        "calls": [[step, len(prompts)] for step, prompts in backend.calls],
        "syncs": [step for step, _ in backend.syncs],
        "turns_played": turns,
        "steps": trainer.state.global_step,
        "unscored": sum(v["unscored"] for v in rewards.ledger.summary().values()),
    }))  # fmt: skip
    trainer.end()  # as `trl grpo --env` ends: without it gloo's threads can abort the exiting interpreter


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
