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


def write_checkout(root):
    """A toy checkout whose ``relay/clemgame.json`` declares two games, as clembench's
    ``wordle/clemgame.json`` declares wordle and its variants, and whose ``relay/in`` holds several
    instances files, as clembench's games do."""
    game = root / "clembench" / "relay"
    (game / "in").mkdir(parents=True)
    (game / "clemgame.json").write_text(json.dumps([_spec("relay"), _spec("relay_probed", instances="instances_probed")]))
    (game / "master.py").write_text(MASTER)
    instances = [{"game_id": i, "word": w} for i, w in enumerate(["apple", "river", "stone"])]
    (game / "in" / "instances.json").write_text(json.dumps({"experiments": [{"name": "words", "game_instances": instances}]}))
    (game / "in" / "instances_probed.json").write_text(json.dumps(
        {"experiments": [{"name": "probed", "probe": True, "game_instances": instances[:1]}]}))
    (game / "in" / "instances_more.json").write_text(json.dumps({"experiments": [
        {"name": name, "probe": name == "long", "game_instances": [{"game_id": i, "word": w} for i, w in enumerate(words)]}
        for name, words in (("short", ["ox", "ant"]), ("long", ["elephant", "crocodile"]), ("other", ["bee"]))]}))
    return root / "clembench"


@pytest.fixture()
def checkout(tmp_path):
    return write_checkout(tmp_path)


def clem_command(checkout, cwd, *args, timeout=300):
    """``rlplugs games clem --checkout CHECKOUT ARGS`` in a subprocess (the user's command)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "rlplugs.tools.cli", "games", "clem", "--checkout", str(checkout), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout)


def records_in(out):
    """The rlplugs records a run wrote under ``out``."""
    from clembench_games.transcripts import load_records

    return list(load_records(out))


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


def test_policy_model_is_a_clemcore_model_and_each_seat_logs_its_calls_in_its_own_episode():
    from clemcore.backends.model_registry import Model

    from clembench_games.clem_adapter import SeatModel

    model = PolicyModel(lambda m: "hi", name="mine")
    assert isinstance(model, Model) and model.name == "mine" and model.temperature == 0.0
    first, second = [], []  # two episodes' calls
    seat_a, seat_b = SeatModel(model, first), SeatModel(model, second)
    seat_a.seat, seat_b.seat = "A", "B"
    prompt, response, text = seat_a.generate_response([{"role": "user", "content": "hello"}])
    assert text == "hi" and prompt == [{"role": "user", "content": "hello"}]
    seat_b.generate_response([{"role": "user", "content": "again"}])
    assert [(c["seat"], c["model"], c["messages"][-1]["content"], c["response"]) for c in first] == [("A", "mine", "hello", "hi")]
    assert [(c["seat"], c["messages"][-1]["content"]) for c in second] == [("B", "again")]
    assert model.generate_response([{"role": "user", "content": "x"}])[2] == "hi"


def test_planning_reads_the_picked_instances_file_and_leaves_each_game_spec_as_declared(checkout, tmp_path):
    """--instances (as clem run -i) names one file for every game, else each game reads its own;
    planning only reads: the specs stay as clemgame.json declares them (relay_probed's own file)."""
    from clembench_games.clem_adapter import plan_run

    picked = plan_run(checkout, ["relay", "relay_probed"], tmp_path / "run", instances="instances_more.json")
    assert {g: p.instances for g, p in picked.items()} == {"relay": "instances_more", "relay_probed": "instances_more"}
    assert [r["experiment"]["name"] for r in picked["relay"].rows] == ["short", "short", "long", "long", "other"]
    assert getattr(picked["relay"].spec, "instances", "instances") == "instances"
    assert picked["relay_probed"].spec.instances == "instances_probed"
    own = plan_run(checkout, ["relay", "relay_probed"], tmp_path / "run")
    assert {g: p.instances for g, p in own.items()} == {"relay": "instances", "relay_probed": "instances_probed"}
    assert [r["experiment"]["name"] for r in own["relay_probed"].rows] == ["probed"]


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
    (broken / "in").mkdir(parents=True)
    (broken / "clemgame.json").write_text(json.dumps(_spec("broken")))
    (broken / "in" / "instances.json").write_text(json.dumps({"experiments": [{"name": "e", "game_instances": [{"game_id": 0}]}]}))
    (broken / "master.py").write_text('raise LookupError("\\n*****\\n  Resource stopwords not found.\\n  Please use ...")\n')
    with pytest.raises(UsageError, match=r"game 'broken' did not load .*: LookupError: Resource stopwords not found.; install"):
        run_games(checkout, ["broken"], policy, tmp_path / "run")


def test_the_clem_command_refuses_an_unknown_game_and_a_used_out_in_one_line_before_loading_a_model(checkout, tmp_path):
    def clem(*games, out):
        return clem_command(checkout, tmp_path, "--model", tmp_path / "no-model", "--games", *games, "--out", out)

    done = clem("relay", "wordle", out=tmp_path / "new")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error: no game 'wordle'" in done.stderr and "games there: relay, relay_probed" in done.stderr
    used = tmp_path / "used"
    used.mkdir()
    (used / "scores.json").write_text("{}")
    done = clem("relay", out=used)
    assert done.returncode == 2 and "not empty" in done.stderr and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def cross_play_run(tmp_path_factory, tiny_qwen35):
    """One run of the user's command with two models, shared by the tests of what it picks, who
    played which seat and which files it writes (importing clemcore takes ~15 s a process):
    ``--model A B --instances instances_more --experiments short long --limit 1``. B is the tiny
    model under another name: the tests check who played where, not what they said."""
    root = tmp_path_factory.mktemp("cross")
    checkout, models = write_checkout(root), (tiny_qwen35, root / "tiny-b")
    models[1].symlink_to(tiny_qwen35, target_is_directory=True)
    done = clem_command(checkout, root, "--model", *models, "--games", "relay", "--instances", "instances_more",
                        "--experiments", "short", "long", "--limit", 1, "--max-new-tokens", 4, "--out", root / "run")
    assert done.returncode == 0, done.stderr[-2000:]
    return checkout, root / "run", models


def test_the_clem_command_plays_the_picked_experiments_of_an_instances_file_and_limits_each_experiment(cross_play_run):
    """--instances picks a file in the game's in/ folder (as clem run -i), --experiments some of its
    experiments, --limit the first N instances of *each* experiment; a wrong name is one line with the
    names there and the closest one, before any model is loaded."""
    from clembench_games.clem_adapter import plan_run

    checkout, out, _ = cross_play_run
    assert sorted(r["instance"]["instance_id"] for r in records_in(out)) == ["long-0", "short-0"]
    assert len(list((out / "clem-results").rglob("interactions.json"))) == 2

    # a wrong name: one line before any model loads (the command prints a UsageError as one line, exit 2:
    # the refusal test above runs that path; a process of its own would cost ~20 s more of CI)
    with pytest.raises(UsageError, match=r"^no experiment 'shrot' \(did you mean 'short'\?\) \(experiments there: "
                                         r"relay: short, long, other\)$"):
        plan_run(checkout, ["relay"], out.parent / "typo", instances="instances_more", experiments=["shrot", "long"])
    with pytest.raises(UsageError, match=r"no instances file 'instance_more' \(did you mean 'instances_more'.*\(files there: "
                                         r"instances, instances_more, instances_probed\)"):
        plan_run(checkout, ["relay"], out.parent / "typo", instances="instance_more")
    with pytest.raises(UsageError, match="game 'relay_probed' has none of the experiments words .it has: probed."):
        plan_run(checkout, ["relay", "relay_probed"], out.parent / "typo", experiments=["words"])


def test_the_clem_command_plays_two_models_in_cross_play_and_records_which_played_each_seat(cross_play_run):
    """--model A B puts A on player 1 and B on player 2 (clem run -m A B); the record says so per
    seat and per turn. In experiment "long" player 2 is asked a probe before player 1's first turn,
    so both models speak even when player 1's reply (a random tiny model's) breaks the format."""
    from clembench_games.clem_adapter import plan_run

    checkout, out, (a, b) = cross_play_run
    record = next(r for r in records_in(out) if r["instance"]["experiment"] == "long")
    assert record["partner"] == "cross-play"
    assert record["players"] == {"Speaker (Player 1)": a.name, "Speaker (Player 2)": b.name}
    assert [(t["seat"], t["model"]) for t in record["turns"]] == [("Speaker (Player 2)", b.name), ("Speaker (Player 1)", a.name)]
    page = next((out / "relay").glob("long-0-*.html")).read_text()
    assert f"<b>Speaker (Player 2):</b> {b.name}" in page
    (run_dir,) = (out / "clem-results").iterdir()
    assert run_dir.name == f"{a.name}--{b.name}"  # clemcore's name for the pair, as clem run names it
    with pytest.raises(UsageError, match=r"game 'relay' has 2 player\(s\): give 1 model .* or 2 .* not 3"):
        plan_run(checkout, ["relay"], out.parent / "three", models=3)


def test_the_clem_commands_results_folder_holds_clem_runs_files_and_clem_transcribe_and_score_read_it(
        cross_play_run, monkeypatch):
    """What clem run writes (clemcore 3.7: run.json per run; instance.json, interactions.json,
    player_N.requests.json and completed.json per episode) is in the adapter's results folder, and
    clemcore's own `clem transcribe` / `clem score` work on it."""
    from clemcore.cli import score, transcripts

    checkout, out, (a, b) = cross_play_run
    (run_dir,) = (out / "clem-results").iterdir()
    run_file = json.loads((run_dir / "run.json").read_text())
    assert run_file["games"]["relay"]["num_instances"] == 2
    assert [m["model_spec"]["model_name"] for m in run_file["player_models"].values()] == [a.name, b.name]
    episodes = {json.loads((e / "instance.json").read_text())["word"]: e for e in run_dir.rglob("episode_*")}
    assert sorted(episodes) == ["elephant", "ox"]
    files = {p.name for p in episodes["elephant"].iterdir()}
    assert {"interactions.json", "player_1.requests.json", "player_2.requests.json", "completed.json"} <= files
    (probe,) = json.loads((episodes["elephant"] / "player_2.requests.json").read_text())["calls"]
    assert probe["call"]["manipulated_prompt_obj"][-1]["content"] == "PROBE: are you ready?"
    assert json.loads((episodes["elephant"] / "player_1.requests.json").read_text())["meta"]["model_name"] == a.name

    monkeypatch.chdir(checkout)  # clemcore finds the game through the working directory
    transcripts("relay", str(out / "clem-results"))  # what `clem transcribe -g relay -r DIR` runs
    score("relay", str(out / "clem-results"))  # `clem score`
    assert all({"transcript.html", "scores.json"} <= {p.name for p in e.iterdir()} for e in episodes.values())


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
