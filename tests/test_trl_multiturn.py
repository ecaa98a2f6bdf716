"""Multi-turn GRPO through the generic episode ``rollout_func`` on the ``count-test`` environment
(real tiny Qwen3.5, real tokenizer and chat template, real TRL trainer, CPU)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")


@pytest.fixture(scope="module")
def count_trainer(tiny_qwen35, tmp_path_factory, episode_grpo_trainer):
    return episode_grpo_trainer(
        tiny_qwen35, "count-test", {"rows": 4}, tmp_path_factory.mktemp("count"),
        max_completion_length=64, turn_tokens=6, max_steps=2,
    )


def test_episode_rollout_masks_environment_text_and_finishes_episodes(count_trainer, run_rollout):
    spec, _, trainer = count_trainer
    rows = [dict(r) for r in spec.dataset("train").select(range(2))]
    out = run_rollout(trainer, rows)
    tok = trainer.processing_class
    assert out["logprobs"] is None
    for prompt_ids, completion, mask, episode in zip(
        out["prompt_ids"], out["completion_ids"], out["env_mask"], out["episode"]
    ):
        assert episode.done and len(episode.replies) == 3  # three turns within the budget
        assert len(mask) == len(completion) <= 64
        env_text = tok.decode([t for t, m in zip(completion, mask) if m == 0])
        model_text = tok.decode([t for t, m in zip(completion, mask) if m == 1])
        assert env_text.count("Next number?") == 2  # the environment's two follow-ups, outside the loss
        assert "Next number?" not in model_text
        assert "Say a number after" in tok.decode(prompt_ids)
        # the model's recorded tokens are exactly what the episode received as replies
        assert "".join(episode.replies) == tok.decode(
            [t for t, m in zip(completion, mask) if m == 1], skip_special_tokens=True
        )


def test_count_env_grpo_two_steps_scores_finished_episodes(count_trainer):
    _, rewards, trainer = count_trainer
    trainer.train()
    logs = [h for h in trainer.state.log_history if "rewards/digits/mean" in h]
    assert len(logs) == 2
    for h in logs:
        assert h["rewards/digits/mean"] is not None and 0.0 <= h["rewards/digits/mean"] <= 1.0
        assert h["rewards/final_len/mean"] is not None
        assert h["unscored/digits"] == 0.0
    summary = rewards.ledger.summary()
    assert summary["digits"]["scored"] == 8 and summary["digits"]["unscored"] == 0


FAULTS = {  # count-test option -> the reason its faulty row's samples are unscored with
    "fail_starts": "episode stopped by an error: RuntimeError: judge crashed (simulated fault)",
    "broken_starts": "episode could not start: ValueError: no episode for start 1 (simulated fault)",
}


@pytest.fixture(scope="module", params=sorted(FAULTS))
def faulty_trainer(request, tiny_qwen35, tmp_path_factory, episode_grpo_trainer):
    """Two rows per step (groups of 2); the episode of row start=1 raises in its second step
    (``fail_starts``) or cannot be started (``broken_starts``)."""
    return request.param, *episode_grpo_trainer(
        tiny_qwen35, "count-test", {"rows": 2, request.param: [1]}, tmp_path_factory.mktemp("faulty"),
        max_completion_length=64, turn_tokens=6, max_steps=1, num_generations=2,
    )


def test_episode_stopped_by_an_error_is_unscored_and_left_out_of_the_grpo_step(faulty_trainer, run_rollout):
    from rlplugs.episode import stop_reason

    fault, spec, rewards, trainer = faulty_trainer
    out = run_rollout(trainer, [dict(r) for r in spec.dataset("train")])
    healthy, faulty = out["episode"]
    assert healthy.done and stop_reason(healthy) is None and len(healthy.replies) == 3
    assert faulty.done and stop_reason(faulty) == FAULTS[fault]
    assert len(out["completion_ids"][1]) > 0  # its tokens are still returned (TRL needs a row per prompt)

    trainer.train()  # one real GRPO step: both rows, two generations each
    (log,) = [h for h in trainer.state.log_history if "rewards/digits/mean" in h]
    assert log["unscored/digits"] == 0.5 and log["unscored/final_len"] == 0.5  # the faulty row's two episodes
    assert 0.0 <= log["rewards/digits/mean"] <= 1.0 and log["reward"] == log["reward"]  # mean over the scored ones
    assert rewards.ledger.summary()["digits"]["reasons"] == {FAULTS[fault]: 2}
