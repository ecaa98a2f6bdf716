"""The clemcore adapter, run only where the ``clem`` extra (clemcore 3.7.0) is installed: its own
venv, since clemcore and verifiers pin incompatible anthropic versions (see the README).

clembench's games may not be copied here, so the test writes a two-player toy game against
clemcore's public legacy API (``clemgame.json``, ``master.py`` with a ``GameBenchmark``, a legacy
``DialogueGameMaster`` and ``GameScorer``, ``in/instances.json``) into a temporary "checkout" and
plays it through the adapter: clemcore's game master and the game's own scorer decide the score.
"""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("clemcore", reason="the clem extra (clemcore) lives in its own venv: pip install -e '.[clem]'")

from rlplugs import UsageError  # noqa: E402

from clembench_games.clem_adapter import PolicyModel, run_games  # noqa: E402
from clembench_games.scoring import clem_table  # noqa: E402
from clembench_games.sft import won_turn_samples  # noqa: E402

MASTER = textwrap.dedent('''
    from clemcore.backends import Model
    from clemcore.clemgame import GameBenchmark, GameSpec, Player
    from clemcore.clemgame.legacy.master import DialogueGameMaster
    from clemcore.clemgame.legacy.scorer import GameScorer
    from clemcore.clemgame.metrics import BENCH_SCORE, METRIC_ABORTED, METRIC_LOSE, METRIC_REQUEST_COUNT, \\
        METRIC_REQUEST_COUNT_PARSED, METRIC_REQUEST_COUNT_VIOLATED


    class Speaker(Player):
        def _custom_response(self, context):
            return "SAY: nothing"


    class Relay(DialogueGameMaster):
        """Player 1 sees a word and says it as 'SAY: <word>'; player 2 repeats it as 'REPEAT: <word>'."""

        def _on_setup(self, **instance):
            self.word = instance["word"]
            self.aborted = self.lost = False
            self.requests = self.violations = 0
            self.speaker, self.repeater = Speaker(self.player_models[0]), Speaker(self.player_models[1])
            self.add_player(self.speaker, initial_context=f"Say the word {self.word} as SAY: <word>")
            self.add_player(self.repeater, initial_prompt="Repeat what you hear as REPEAT: <word>")

        def _validate_player_response(self, player, response):
            self.requests += 1
            key = "SAY:" if player is self.speaker else "REPEAT:"
            if not response.strip().startswith(key):
                self.aborted = True
                self.violations += 1
                return False
            return True

        def _on_valid_player_response(self, player, response):
            word = response.split(":", 1)[1].strip().lower()
            if player is self.speaker:
                self.set_context_for(self.repeater, f"You hear: {word}")
            else:
                self.lost = word != self.word
                self.done = True

        def _on_before_game(self):
            if self.experiment.get("probe"):  # a call before the first turn, as privateshared's probe round
                self.ready = self.repeater(dict(role="user", content="PROBE: are you ready?"))

        def _does_game_proceed(self):
            return not self.aborted and not getattr(self, "done", False)

        def _on_after_game(self):
            self.log_key(METRIC_ABORTED, int(self.aborted))
            self.log_key(METRIC_LOSE, int(self.lost))
            self.log_key(METRIC_REQUEST_COUNT, self.requests)
            self.log_key(METRIC_REQUEST_COUNT_PARSED, self.requests - self.violations)
            self.log_key(METRIC_REQUEST_COUNT_VIOLATED, self.violations)


    class RelayScorer(GameScorer):
        def __init__(self, experiment, game_instance):
            super().__init__("relay", experiment, game_instance)

        def score_turns(self, interactions):
            pass

        def log_main_score(self, interactions):
            ok = not interactions[METRIC_ABORTED] and not interactions[METRIC_LOSE]
            self.log_episode_score(BENCH_SCORE, 100 if ok else (float("nan") if interactions[METRIC_ABORTED] else 0))


    class RelayBenchmark(GameBenchmark):
        def create_game_master(self, experiment, player_models):
            return Relay(self.game_spec, experiment, player_models)

        def create_game_scorer(self, experiment, game_instance):
            return RelayScorer(experiment, game_instance)
''')


def _spec(name: str, **more) -> dict:
    return {"game_name": name, "description": "toy", "main_game": "relay", "players": 2, "image": "none",
            "languages": ["en"], "benchmark": [], **more}


@pytest.fixture()
def checkout(tmp_path):
    """A toy checkout whose ``relay/clemgame.json`` declares two games, as clembench's
    ``wordle/clemgame.json`` declares wordle and its variants."""
    game = tmp_path / "clembench" / "relay"
    (game / "in").mkdir(parents=True)
    (game / "clemgame.json").write_text(json.dumps([_spec("relay"), _spec("relay_probed", instances="instances_probed")]))
    (game / "master.py").write_text(MASTER)
    instances = [{"game_id": i, "word": w} for i, w in enumerate(["apple", "river", "stone"])]
    (game / "in" / "instances.json").write_text(json.dumps({"experiments": [{"name": "words", "game_instances": instances}]}))
    (game / "in" / "instances_probed.json").write_text(json.dumps(
        {"experiments": [{"name": "probed", "probe": True, "game_instances": instances[:1]}]}))
    return tmp_path / "clembench"


def policy(messages):
    """The speaker says the word; the repeater repeats it, but breaks the format on 'river' (an
    abort) and mishears 'stone' (a loss)."""
    last = messages[-1]["content"]
    if last.startswith("PROBE:"):
        return "READY"
    if "Say the word" in last:
        return "SAY: " + last.split("Say the word ")[1].split()[0]
    word = last.rsplit("You hear: ", 1)[1].strip()
    return {"river": "it was river", "stone": "REPEAT: stones"}.get(word, f"REPEAT: {word}")


def test_policy_plays_every_role_and_the_games_own_scorer_decides(checkout, tmp_path):
    out = tmp_path / "run"
    records = run_games(checkout, ["relay"], policy, out).records
    by_word = {r["instance"]["game_id"]: r for r in records}
    assert len(records) == 3
    assert by_word[0]["outcome"] == "success" and by_word[0]["metrics"]["Main Score"] == 100.0
    assert by_word[1]["outcome"] == "aborted" and by_word[1]["metrics"]["Main Score"] is None
    assert by_word[2]["outcome"] == "failure" and by_word[2]["metrics"]["Main Score"] == 0.0
    seats = [t["seat"] for t in by_word[0]["turns"]]
    assert len(seats) == 2 and seats[0] != seats[1]  # self-play: one policy, both roles
    # the repeater's perspective includes its initial prompt merged with the context (Player.__call__)
    assert by_word[0]["turns"][1]["messages"][-1]["content"].startswith("Repeat what you hear")
    table = clem_table(records)
    assert table["games"]["relay"]["% Played"] == pytest.approx(200 / 3)
    assert table["clemscore"] == pytest.approx(2 / 3 * 50.0)
    assert [s["instance_id"] for s in won_turn_samples(records)] == ["words-0", "words-0"]
    assert list((out / "clem-results").rglob("interactions.json"))  # the standard tree for `clem score`
    assert (out / "index.html").exists()


def test_clemcores_own_score_and_eval_agree_with_our_clemscore(checkout, tmp_path, monkeypatch):
    from clemcore.cli import score
    from clemcore.clemeval import perform_evaluation

    records = run_games(checkout, ["relay"], policy, tmp_path / "run").records
    monkeypatch.chdir(checkout)  # clemcore finds the game through the working directory
    score("relay", str(tmp_path / "run" / "clem-results"))
    table = perform_evaluation(str(tmp_path / "run" / "clem-results"), return_dataframe=True)
    theirs = float(table["-, clemscore"].iloc[0])
    assert theirs == pytest.approx(clem_table(records)["clemscore"], abs=0.01)  # clemeval rounds to 2 digits


def test_nothing_played_is_a_blank_clemscore_in_clem_eval_and_ours(checkout, tmp_path, monkeypatch):
    import math

    from clemcore.cli import score
    from clemcore.clemeval import perform_evaluation

    records = run_games(checkout, ["relay"], lambda m: "no format", tmp_path / "run").records
    assert [r["outcome"] for r in records] == ["aborted"] * 3
    monkeypatch.chdir(checkout)
    score("relay", str(tmp_path / "run" / "clem-results"))
    table = perform_evaluation(str(tmp_path / "run" / "clem-results"), return_dataframe=True)
    assert math.isnan(float(table["-, clemscore"].iloc[0])) and math.isnan(clem_table(records)["clemscore"])


def test_policy_model_is_a_clemcore_model_that_logs_calls():
    from clemcore.backends.model_registry import Model

    model = PolicyModel(lambda m: "hi", name="mine")
    assert isinstance(model, Model) and model.name == "mine" and model.temperature == 0.0
    prompt, response, text = model.generate_response([{"role": "user", "content": "hello"}])
    assert text == "hi" and model.calls[0]["messages"] == [{"role": "user", "content": "hello"}]


def test_a_game_declared_beside_others_in_one_clemgame_json_loads_and_its_before_game_calls_are_recorded(
        checkout, tmp_path):
    """relay_probed is declared in relay/clemgame.json (like wordle_withclue in wordle/) and asks the
    repeater a probe in before_game (like privateshared's probe round): that call is in the record,
    under the repeater's seat, and so in the SFT samples of the won episode."""
    (record,) = run_games(checkout, ["relay_probed"], policy, tmp_path / "run").records
    assert record["game"] == "relay_probed" and record["outcome"] == "success"
    seats = [t["seat"] for t in record["turns"]]
    assert [t["response"] for t in record["turns"]] == ["READY", "SAY: apple", "REPEAT: apple"]
    assert seats[0] == seats[2] != seats[1]  # the probe was asked to the repeater
    assert [s["messages"][-1]["content"] for s in won_turn_samples([record])][0] == "READY"


def test_every_instance_failing_is_one_clear_error_and_single_failures_are_returned(checkout, tmp_path):
    def broken(messages):
        raise RuntimeError("backend down")

    with pytest.raises(UsageError, match=r"every instance failed \(3\), e.g. relay 0: RuntimeError: backend down"):
        run_games(checkout, ["relay"], broken, tmp_path / "dead")
    assert not (tmp_path / "dead" / "scores.json").exists()

    def flaky(messages):
        if "river" in messages[-1]["content"]:
            raise RuntimeError("timeout")
        return policy(messages)

    run = run_games(checkout, ["relay"], flaky, tmp_path / "run")
    assert len(run.records) == 2 and run.failures == [("relay", 1, "RuntimeError: timeout")]


def test_unknown_game_and_a_used_out_directory_are_refused_before_playing(checkout, tmp_path):
    with pytest.raises(UsageError, match=r"no game 'wordle' in .* \(games there: relay, relay_probed\)"):
        run_games(checkout, ["relay", "wordle"], policy, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    first = run_games(checkout, ["relay"], policy, tmp_path / "run").records
    saved = sorted(p.read_text() for p in (tmp_path / "run").rglob("*.json"))
    with pytest.raises(UsageError, match="not empty .* pass a new --out"):
        run_games(checkout, ["relay"], policy, tmp_path / "run")
    assert sorted(p.read_text() for p in (tmp_path / "run").rglob("*.json")) == saved and len(first) == 3


def test_a_game_whose_code_does_not_load_is_one_clear_error(checkout, tmp_path):
    """clembench's taboo fails at import without NLTK's stopwords (a LookupError whose message
    starts with a line of stars); the user gets its first real line and what to do."""
    broken = checkout / "broken"
    broken.mkdir()
    (broken / "clemgame.json").write_text(json.dumps(_spec("broken")))
    (broken / "master.py").write_text('raise LookupError("\\n*****\\n  Resource stopwords not found.\\n  Please use ...")\n')
    with pytest.raises(UsageError, match=r"game 'broken' did not load .*: LookupError: Resource stopwords not found.; install"):
        run_games(checkout, ["broken"], policy, tmp_path / "run")


def test_the_clem_command_refuses_an_unknown_game_and_a_used_out_in_one_line_before_loading_a_model(checkout, tmp_path):
    import subprocess
    import sys

    def clem(*games, out):
        cmd = [sys.executable, "-m", "rlplugs.tools.cli", "games", "clem", "--checkout", str(checkout),
               "--model", str(tmp_path / "no-model"), "--games", *games, "--out", str(out)]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)

    done = clem("relay", "wordle", out=tmp_path / "new")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error: no game 'wordle'" in done.stderr and "games there: relay, relay_probed" in done.stderr
    used = tmp_path / "used"
    used.mkdir()
    (used / "scores.json").write_text("{}")
    done = clem("relay", out=used)
    assert done.returncode == 2 and "not empty" in done.stderr and "Traceback" not in done.stderr


def test_taboo_stems_like_clembenchs_stemmer_on_our_word_lists():
    """clembench's taboo stems with NLTK's SnowballStemmer("english") (nltk comes with clemcore);
    ours with the snowballstemmer package: the two agree on all but a handful of word forms."""
    from nltk.stem.snowball import SnowballStemmer

    from clembench_games.taboo import stem
    from clembench_games.words import words

    nltk_stem = SnowballStemmer("english").stem
    base = sorted(set(words("noun")) | set(words("adjective")) | set(words("verb")))
    forms = [w + end for w in base for end in ("", "s", "ing", "ed")]
    differ = [w for w in forms if stem(w) != nltk_stem(w)]
    assert len(differ) <= 8, differ[:20]  # 6 of 32,136 with snowballstemmer 2.2.0 (96 with 3.1.1)
