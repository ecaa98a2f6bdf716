"""PRM labels: Monte-Carlo values are the mean outcome of continuations after each candidate,
outcome labels propagate the episode result, and the row format is checked on read."""

from __future__ import annotations

import json
import subprocess

import pytest
from prm_scripted import ScriptedPolicy
from test_cli import RLPLUGS

from rlplugs.episode import guard, play, stop_reason
from rlplugs.builtins.prm.guidance import Proposer
from rlplugs.builtins.prm.labels import load_rows, monte_carlo_labels, outcome_labels, outcome_value, save_rows
from rlplugs import play_lockstep
from rlplugs.registry import make_env

DIGITS = {"digits": 1.0}


@pytest.fixture(scope="module")
def count_env():
    return make_env("count-test", {"rows": 2, "turns": 3})


def episodes(env, n=2):
    return [env.episodes(row) for row in list(env.dataset("train"))[:n]]


def test_monte_carlo_label_is_mean_outcome_of_continuations_after_the_candidate(count_env):
    # Candidates "7" and "seven" at each turn; continuations say "7". digits = share of turns
    # with a digit, so a "7" turn leads to 3/3 and a "seven" turn to 2/3, whatever the turn.
    policy = ScriptedPolicy(["7", "seven"])
    rows = monte_carlo_labels(episodes(count_env), policy, DIGITS, k=3, candidates=2)
    assert len(rows) == 2 * 3 * 2  # episodes x learner turns x candidates
    for row in rows:
        candidate = row["messages"][-1]
        assert candidate["role"] == "assistant"
        assert row["label"] == pytest.approx(1.0 if candidate["content"] == "7" else 2 / 3)
        assert row["meta"]["method"] == "monte_carlo" and row["meta"]["continuations"] == 3
        assert row["meta"]["scored"] == 3
    # The context of turn t holds the t earlier replies of the main game (which plays candidate 0).
    turn2 = [r for r in rows if r["meta"]["turn"] == 2 and r["meta"]["episode"] == 0]
    assert [m["content"] for m in turn2[0]["messages"] if m["role"] == "assistant"][:2] == ["7", "7"]
    # All continuations of all turns advance together: one generate call per round, not per game
    # (those after the last turn's candidate are already over: 2 episodes x 2 turns x 2 x k=3).
    continuation_calls = [c for c in policy.calls if c[1] == 1]
    assert max(c[0] for c in continuation_calls) == 2 * 2 * 2 * 3


def test_a_proposer_with_the_greedy_reply_first_and_a_greedy_finish(count_env):
    # The greedy policy says "7", its sampling copy "seven": each turn's candidates are the greedy
    # reply and one sample, each played out greedily, and the main game follows the greedy reply.
    policy = ScriptedPolicy(["7"], sampled=["seven"])
    propose = Proposer(policy, 2, temperature=0.7, policy_reply=True)
    rows = monte_carlo_labels(episodes(count_env), policy, DIGITS, k=1, candidates=propose)
    assert len(rows) == 2 * 3 * 2
    for row in rows:
        first = row["meta"]["candidate_index"] == 0
        assert row["messages"][-1]["content"] == ("7" if first else "seven")
        assert row["label"] == pytest.approx(1.0 if first else 2 / 3)  # the continuation said "7" every turn
        assert [m["content"] for m in row["messages"][:-1] if m["role"] == "assistant"] == ["7"] * row["meta"]["turn"]
    with pytest.raises(ValueError, match="candidates >= 1, got k=1, candidates=0"):
        monte_carlo_labels(episodes(count_env), policy, DIGITS, k=1, candidates=Proposer(policy, 0, None))


def test_monte_carlo_labels_leave_the_callers_episodes_unplayed(count_env):
    eps = episodes(count_env, 1)
    monte_carlo_labels(eps, ScriptedPolicy(["7"]), DIGITS, k=1, candidates=1)
    assert not eps[0].done and eps[0].observation()[-1]["role"] == "user"


def test_outcome_labels_give_every_learner_turn_its_episode_outcome(count_env):
    replies = iter(["7", "seven", "7"])
    ep = play(episodes(count_env, 1)[0], lambda messages: next(replies))
    rows = outcome_labels([ep], DIGITS)
    assert [r["messages"][-1]["content"] for r in rows] == ["7", "seven", "7"]
    assert all(r["label"] == pytest.approx(2 / 3) for r in rows)
    assert [len(r["messages"]) for r in rows] == [3, 5, 7]  # each context ends just before its turn


def test_unfinished_or_unscored_episode_gives_no_outcome(count_env):
    ep = episodes(count_env, 1)[0]
    assert outcome_value(ep, DIGITS) is None  # unscored ("episode not finished"), not 0
    with pytest.raises(ValueError, match="not finished"):
        outcome_labels([ep], DIGITS)


def test_an_episode_stopped_by_an_error_gives_no_labels_and_the_others_do(caplog):
    env = make_env("count-test", {"rows": 2, "fail_starts": [1]})  # row 1 raises on its second turn
    rows = monte_carlo_labels(episodes(env), ScriptedPolicy(["7", "seven"]), DIGITS, k=2, candidates=2)
    assert len(rows) == 3 * 2 and {r["meta"]["episode"] for r in rows} == {0}  # its continuations all stopped
    assert "4 candidates had no scored continuation" in caplog.text
    games = [guard(ep) for ep in episodes(env)]
    play_lockstep(games, ScriptedPolicy(["7"]))
    assert "judge crashed" in stop_reason(games[1]) and outcome_value(games[1], DIGITS) is None
    assert len(outcome_labels(games, DIGITS)) == 3  # row 0's three turns


def test_prm_label_command_labels_the_rows_an_error_did_not_stop(tmp_path, tiny_qwen35, plugin_env):
    out = tmp_path / "rows.jsonl"
    faults = '{"rows": 3, "fail_starts": [1], "broken_starts": [2]}'  # row 1 fails mid-game, row 2 cannot start
    done = subprocess.run(
        [RLPLUGS, "prm", "label", "--env", "count-test", "--env_args", faults, "--model",
         str(tiny_qwen35), "--method", "outcome", "--rows", "3", "--max_new_tokens", "4", "--out", str(out)],
        env=plugin_env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    labelled = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(labelled) == 3 and {r["meta"]["row"] for r in labelled} == {0}  # rows 1 and 2 were stopped
    assert "judge crashed (simulated fault)" in done.stderr and "no episode for start 2" in done.stderr
    assert "2 of 3 episodes unscored" in done.stderr


def test_unknown_outcome_component_names_the_real_ones(count_env):
    ep = play(episodes(count_env, 1)[0], lambda m: "1")
    with pytest.raises(KeyError, match="digits"):
        outcome_value(ep, {"wins": 1.0})


def test_rows_round_trip_and_a_malformed_line_is_named(count_env, tmp_path):
    rows = monte_carlo_labels(episodes(count_env, 1), ScriptedPolicy(["7", "x"]), DIGITS, k=1, candidates=2)
    path = save_rows(rows, tmp_path / "rows.jsonl")
    assert load_rows(path) == rows
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text() + json.dumps({"messages": [{"role": "user", "content": "hi"}], "label": 1}) + "\n")
    with pytest.raises(ValueError, match=rf"bad.jsonl:{len(rows) + 1}: .*candidate assistant turn"):
        load_rows(bad)
    bad.write_text(json.dumps({**rows[0], "label": 1.5}) + "\n")
    with pytest.raises(ValueError, match=r"label 1.5 outside"):
        load_rows(bad)


def test_monte_carlo_labels_on_a_clembench_game_with_the_tiny_model(tiny_qwen35):
    pytest.importorskip("clembench_games.plugin")
    from rlplugs.tools.policies import HFPolicy

    env = make_env("clembench-games", {"games": ["wordle"], "validation_per_experiment": 1})
    row = list(env.dataset("validation"))[0]
    policy = HFPolicy(tiny_qwen35, temperature=1.0, max_new_tokens=8, seed=0)
    rows = monte_carlo_labels([env.episodes(row)], policy, {"main_score": 1.0}, k=2, candidates=2)
    assert rows and len(rows) % 2 == 0
    assert all(0.0 <= r["label"] <= 1.0 and r["meta"]["scored"] == 2 for r in rows)
    assert rows[0]["messages"][:-1] == env.episodes(row).observation()
