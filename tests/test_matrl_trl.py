"""matrl through TRL's multi-turn path: the generic episode ``rollout_func`` plays real matrl
episodes with the tiny Qwen3.5 (real tokenizer and chat template), the environment's tool
responses stay out of the loss, and every component of the finished episodes is scored."""

from __future__ import annotations

import json
import math

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def matrl_trainer(tiny_qwen35, tmp_path_factory, episode_grpo_trainer):
    spec, _, trainer = episode_grpo_trainer(
        tiny_qwen35, "matrl", {"max_turns": 2, "relax_steps": 4, "elastic_judge": False, "rows": 8},
        tmp_path_factory.mktemp("matrl"), max_completion_length=4096, turn_tokens=8, max_steps=1,
    )
    return spec, trainer


def test_rollout_plays_matrl_episodes_to_their_turn_limit_with_tool_text_masked(matrl_trainer, run_rollout):
    spec, trainer = matrl_trainer
    rows = [dict(r) for r in spec.dataset("train").select(range(2))]
    out = run_rollout(trainer, rows)
    tok = trainer.processing_class
    for completion, mask, episode in zip(out["completion_ids"], out["env_mask"], out["episode"]):
        assert episode.done  # random text never submits: the 2-turn budget ends the episode
        assert 0 < sum(mask) < len(mask)  # model turns trained, tool responses masked
        env_text = tok.decode([t for t, m in zip(completion, mask) if m == 0])
        assert "<tool_response>" in env_text  # the env's answer to the first (malformed) turn
        assert "<tool_response>" not in tok.decode([t for t, m in zip(completion, mask) if m == 1])
        scores = episode.scores()
        assert scores["valid"].value == 0.0 and scores["valid"].reason == "no submission"


def test_matrl_grpo_step_logs_every_component(matrl_trainer):
    spec, trainer = matrl_trainer
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert logs, "no training step was logged"
    for component in spec.components:
        key = f"rewards/{component.name}/mean"
        assert key in logs[0], f"{key} not logged"
    assert logs[0]["rewards/sun_marginal/mean"] == 0.0
    assert not math.isnan(logs[0]["reward"])


def test_judge_down_sample_gets_no_grpo_reward_while_its_group_is_scored(matrl_trainer):
    """TRL leaves a row out of the group baseline only when every reward function returned None;
    a judge-down sample's scored weight-0 metric (its formula is known) must not make it a 0."""
    from test_matrl_unscored import KCL, NACL, UnreachableJudge, formula_row, played, submit

    _, trainer = matrl_trainer
    episodes = [played(None, [submit(NACL)]), played(None, [submit(KCL)]), played(UnreachableJudge(), [submit(NACL)]),
                played(None, ["still thinking"])]
    row = formula_row()
    inputs = [{**row, "target": json.dumps(row["target"]), "episode": ep} for ep in episodes]
    rewards = trainer._calculate_rewards(inputs, [row["prompt"]] * 4, [""] * 4, [[i] for i in range(4)])
    names = trainer.reward_func_names
    assert torch.isnan(rewards[2]).all(), dict(zip(names, rewards[2].tolist()))  # no reward, not 0
    weighted = trainer.reward_weights.cpu() != 0
    assert not torch.isnan(rewards[[0, 1, 3]][:, weighted]).all(dim=1).any()  # the others keep a reward
    assert rewards[3, names.index("group_diversity")] == 0.0  # never submitted: a real 0
