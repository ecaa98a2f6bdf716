"""clembench-games through verifiers v1 (the prime-rl path): the bridge's multi-seat Env plays a
self-play episode with both seats answered over HTTP by the message-only reference player."""

from __future__ import annotations

import asyncio

import pytest

vf = pytest.importorskip("verifiers.v1")
from verifiers.v1.cli.eval.runner import run_eval  # noqa: E402
from verifiers.v1.configs.cli.eval import EvalConfig  # noqa: E402
from verifiers.v1.utils import loaders  # noqa: E402

from rlplugs.tools.policy_server import serve_policy  # noqa: E402

from clembench_games.reference import reference_policy  # noqa: E402


def test_loader_finds_the_taskset_and_the_multi_seat_env_by_id():
    assert loaders.taskset_class("clembench-games").__name__ == "ClembenchGamesTaskset"
    assert loaders.environment_class("clembench-games").__name__ == "ClembenchGamesEnv"


def test_self_play_taboo_episode_trains_both_seats_and_is_scored(tmp_path, monkeypatch):
    monkeypatch.setenv("RLPLUGS_TEST_KEY", "local")
    env = {"taskset": {"id": "clembench-games", "split": "validation", "games": ["taboo"]},
           "agent": {"runtime": {"type": "subprocess"}}}
    with serve_policy(reference_policy, idle_timeout_s=120) as server:
        config = EvalConfig(env=env, model="reference", client={"base_url": server.base_url, "api_key_var": "RLPLUGS_TEST_KEY"},
                            num_rollouts=1, push=False, rich=None, output_dir=tmp_path, select={"limit": 1})
        (episode,) = asyncio.run(run_eval(config))
    assert episode.ok, episode.errors
    assert server.requests == 2  # describer clue, guesser guess: won in round one
    assert len(episode.traces) == 2 and all(t.agent.trainable for t in episode.traces)
    for trace in episode.traces:
        assert trace.rewards["main_score"].score == 1.0 and trace.rewards["success"].score == 1.0
    replies = sorted(t.last_reply for t in episode.traces)
    assert replies[0].startswith("CLUE: a noun that fits the pattern") and replies[1].startswith("GUESS: ")


def play(tmp_path, monkeypatch, taskset: dict, limit: int, policy=reference_policy):
    monkeypatch.setenv("RLPLUGS_TEST_KEY", "local")
    env = {"taskset": {"id": "clembench-games", "split": "validation", **taskset}, "agent": {"runtime": {"type": "subprocess"}}}
    with serve_policy(policy, idle_timeout_s=120) as server:
        config = EvalConfig(env=env, model="reference", client={"base_url": server.base_url, "api_key_var": "RLPLUGS_TEST_KEY"},
                            num_rollouts=1, push=False, rich=None, output_dir=tmp_path, select={"limit": limit})
        return asyncio.run(run_eval(config))


def test_each_seat_names_its_trace_so_prime_rl_rae_keeps_one_baseline_per_role(tmp_path, monkeypatch):
    """prime-rl's RAE keys its baselines by ``trace.agent.name``; the one ``agent`` plays every
    trained seat, so the bridge names each seat's trace after the seat (before: all ``agent``)."""
    (episode,) = play(tmp_path / "self-play", monkeypatch, {"games": ["taboo"]}, limit=1)
    assert episode.ok, episode.errors
    assert sorted(t.agent.name for t in episode.traces) == ["describer", "guesser"]
    assert all(t.agent.trainable for t in episode.traces)
    # one trained seat per row, the scripted partner on the other: still named by the seat
    episodes = play(tmp_path / "single", monkeypatch, {"games": ["taboo"], "seats": "single"}, limit=2)
    names = sorted(t.agent.name for e in episodes for t in e.traces)
    assert names == ["describer", "guesser"], names


def test_an_aborted_episode_scores_0_with_the_abort_on_the_trace(tmp_path, monkeypatch):
    """A reply that breaks its format aborts the game: a real 0, and the trace says why (the reason
    was dropped on the way to verifiers, so a 0 read the same as a lost game)."""
    (episode,) = play(tmp_path, monkeypatch, {"games": ["taboo"]}, limit=1, policy=lambda messages: "I am not sure.")
    assert episode.ok, episode.errors
    (describer,) = [t for t in episode.traces if t.agent.name == "describer"]
    assert describer.rewards["played"].score == 0.0 and describer.rewards["main_score"].score == 0.0
    reasons = describer.info["reasons"]
    assert set(reasons) == {"main_score", "played", "success"}
    assert reasons["played"].startswith("aborted") and "CLUE" in reasons["played"], reasons
