"""clembench-games as trainers see it: the registered EnvSpec, dataset rows, episodes from rows
(also after an Arrow round trip), seats, reward components, preflight and transcripts."""

import json

import pytest

from rlplugs.episode import Episode
from rlplugs.registry import UnknownOptionError, make_env
from rlplugs.rewards import Sample

from clembench_games import GAMES
from clembench_games.transcripts import load_records, save_episode, write_index


@pytest.fixture(scope="module")
def spec():
    return make_env("clembench-games", {"train_per_experiment": 2})


def test_registered_spec_has_splits_components_eval_protocol_and_sft_set(spec):
    assert spec.multi_turn and set(spec.datasets) == {"train", "validation", "test"}
    assert [c.name for c in spec.components] == ["main_score", "played", "success"]
    assert spec.eval.report_by == ("game",) and spec.eval.success_component == "success"
    assert spec.eval.temperature == 0.0 and spec.eval.enable_thinking is False
    sft = spec.sft_dataset("scripted-wins")
    assert len(sft) > 0 and [m["role"] for m in sft[0]["completion"]] == ["assistant"]
    assert sft[0]["prompt"][-1]["role"] == "user"  # only the final turn is trained


def test_self_play_rows_give_each_seat_a_row_and_rebuild_the_same_episode_after_arrow(spec):
    ds = spec.dataset("validation")
    assert set(ds.column_names) >= {"game", "experiment", "instance_id", "seed", "seat", "prompt", "self_play"}
    assert set(ds["game"]) == set(GAMES)
    taboo = [r for r in ds if r["game"] == "taboo" and r["instance_id"] == "validation-short_words-0"]
    assert sorted(r["seat"] for r in taboo) == ["describer", "guesser"] and all(r["self_play"] for r in taboo)
    describer, guesser = sorted(taboo, key=lambda r: r["seat"])
    ep = spec.episodes(describer)
    assert isinstance(ep, Episode) and set(ep.trained_seats) == {"describer", "guesser"}
    assert ep.observation() == describer["prompt"]  # the seat that acts first: its real opening
    assert guesser["prompt"][0]["content"].startswith("We play Taboo. Another player describes")
    ep.step("CLUE: a light you carry")
    assert ep.current_seat == "guesser"  # self-play: the policy answers for the partner too


def test_single_seat_rows_give_each_llm_seat_its_own_row_against_a_scripted_partner():
    spec = make_env("clembench-games", {"seats": "single", "games": ["referencegame"]})
    ds = spec.dataset("test")
    assert sorted(set(ds["seat"])) == ["follower", "giver"]
    row = next(r for r in ds if r["seat"] == "follower")
    ep = spec.episodes(row)
    assert ep.trained_seats == ("follower",) and ep.current_seat == "follower"
    assert "Expression: the grid with X exactly at" in row["prompt"][-1]["content"]


def test_components_score_finished_episodes_and_aborts_are_real_zeros(spec):
    row = spec.dataset("validation")[0]
    won, broken = spec.episodes(row), spec.episodes(row)
    won.step(f"explanation: x\nguess: {won.game.target}")
    broken.step("no idea")
    scores = spec.score([Sample(row["prompt"], "", row, won), Sample(row["prompt"], "", row, broken)])
    assert {k: s.value for k, s in scores[0].items()} == {"main_score": 1.0, "played": 1.0, "success": 1.0}
    assert scores[1]["main_score"].value == 0.0 and scores[1]["main_score"].reason == "aborted: reply does not start with 'explanation:'"
    missing = spec.score([Sample(row["prompt"], "", row, None)])[0]["main_score"]
    assert missing.value is None and "no episode" in missing.reason  # unscored, not 0


def test_preflight_scores_real_scripted_episodes(spec):
    report = spec.preflight()
    assert report["main_score"]["scored"] == report["main_score"]["of"] == 2 * len(GAMES)
    assert max(report["success"]["values"]) == 1.0


def test_unknown_options_and_games_fail_with_suggestions():
    with pytest.raises(UnknownOptionError, match="did you mean 'games'"):
        make_env("clembench-games", {"game": ["taboo"]})
    with pytest.raises(ValueError, match="did you mean 'taboo'"):
        make_env("clembench-games", {"games": ["tabo"]})


def test_transcripts_round_trip_as_json_with_an_html_page_each_and_an_index(spec, tmp_path):
    samples = spec.preflight_samples()
    for i, s in enumerate(samples):
        save_episode(tmp_path, s.episode.record(), i)
    records = list(load_records(tmp_path))
    assert len(records) == len(samples)
    assert json.loads(json.dumps(records[0])) == records[0]
    index = write_index(tmp_path)
    page = index.read_text()
    assert "clemscore" in page and page.count("<li>") == len(samples)
    html = next(p for p in tmp_path.rglob("*.html") if p.name != "index.html").read_text()
    assert "GM →" in html and "</html>" in html
    assert json.loads((tmp_path / "scores.json").read_text())["games"].keys() == set(GAMES)


def test_games_cli_rejects_unknown_games_and_missing_runs_with_exit_code_2(tmp_path, capsys):
    from rlplugs.tools.cli import main

    assert main(["games", "collect", "--model", str(tmp_path), "--games", "wordel", "--out", str(tmp_path / "o")]) == 2
    assert "did you mean 'wordle'" in capsys.readouterr().err
    assert main(["games", "sft-data", "--runs", str(tmp_path / "none"), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "no run directory" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_single_seat_rows_build_on_every_split_with_the_perfect_partner():
    """Every row's scripted partner opens legally (regression: the perfect taboo describer once
    clued the target 'word' with the phrase 'my word', which aborted the game before the trained
    guesser's first turn)."""
    spec = make_env("clembench-games", {"seats": "single"})
    for split in ("train", "validation", "test"):
        ds = spec.dataset(split)
        assert len(ds) > 0
        assert all(row["prompt"] for row in ds)
