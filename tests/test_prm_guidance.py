"""PRM training and guidance end to end on the tiny Qwen3.5: a PRM really trained on Monte-Carlo
labels from count-test ranks candidates by what its labels favoured, best-of-n and beam search
play accordingly, and flipping the labels flips the choices. Best-of-n's PRM-free controls pick
among the same candidates: at random (a uniform draw among the samples) and by the outcome of one
rollout per candidate. With ``policy_reply`` the policy's own turn is the first candidate, so a
search can play it when every sample is worse."""

from __future__ import annotations

import json

import pytest
import torch
from prm_scripted import ScriptedPolicy

from rlplugs.episode import stop_reason
from rlplugs.builtins.prm.controls import OutcomePick, RandomPick
from rlplugs.builtins.prm.guidance import BeamSearch, BestOfN, GuidedEpisode
from rlplugs.builtins.prm.labels import monte_carlo_labels, save_rows
from rlplugs.builtins.prm.model import PRMScorer, save_prm
from rlplugs.builtins.prm.train import PRMTrainConfig, train_prm
from rlplugs.registry import UnknownOptionError, make_env, get_registry

DIGITS = {"digits": 1.0}


@pytest.fixture(scope="module")
def env():
    return make_env("count-test", {"rows": 4, "turns": 3})


@pytest.fixture(scope="module")
def rows(env):
    """MC labels where a "7" turn is worth 1.0 and a "seven" turn 2/3 (see test_prm_labels)."""
    return monte_carlo_labels([env.episodes(r) for r in env.dataset("train")], ScriptedPolicy(["7", "seven"]), DIGITS,
                              k=1, candidates=2)  # fmt: skip


def _train(rows, tmp_path_factory, tiny_qwen35, name, **options):
    data = save_rows(rows, tmp_path_factory.mktemp(name) / "rows.jsonl")
    config = PRMTrainConfig(data=str(data), model=str(tiny_qwen35), out=str(data.parent / "prm"),
                            learning_rate=1e-3, epochs=3, batch_size=8, max_length=256, **options)  # fmt: skip
    return train_prm(config)


@pytest.fixture(scope="module")
def digit_prm(rows, tmp_path_factory, tiny_qwen35):
    return _train(rows, tmp_path_factory, tiny_qwen35, "digits")


@pytest.fixture(scope="module")
def word_prm(rows, tmp_path_factory, tiny_qwen35):
    flipped = [{**r, "label": 1.0 - r["label"]} for r in rows]  # now "seven" is the better turn
    return _train(flipped, tmp_path_factory, tiny_qwen35, "words")


@pytest.fixture(scope="module")
def digit_scorer(digit_prm):
    return PRMScorer(digit_prm)


@pytest.fixture(scope="module")
def word_scorer(word_prm):
    return PRMScorer(word_prm)


def test_trained_prm_ranks_candidates_as_its_labels_did_and_flips_with_them(env, digit_prm, digit_scorer, word_scorer):
    context = env.episodes({"start": 555}).observation()  # a start number never seen in training
    digit = digit_scorer.score([context, context], ["7", "seven"])
    word = word_scorer.score([context, context], ["7", "seven"])
    assert digit[0] > digit[1]
    assert word[1] > word[0]
    summary = json.loads((digit_prm / "prm_training.json").read_text())
    assert summary["rows"] == 24 and summary["steps"] == 9


@pytest.mark.parametrize(("scorer", "expected", "digits"), [("digit_scorer", "7", 1.0), ("word_scorer", "seven", 0.0)])
def test_best_of_n_plays_the_candidate_the_prm_prefers(env, request, scorer, expected, digits):
    policy = ScriptedPolicy(["seven", "7"])  # "seven" is the first sample, so choosing is visible
    guidance = BestOfN(request.getfixturevalue(scorer), n=2, temperature=None)
    played = guidance.play(env.episodes({"start": 300}), policy)
    assert isinstance(played, GuidedEpisode) and played.done
    turns = played.record()["guidance"]["turns"]
    assert [t["candidates"][t["chosen"]] for t in turns] == [expected] * 3
    assert all(max(t["scores"]) == t["scores"][t["chosen"]] and len(t["scores"]) == 2 for t in turns)
    assert played.scores()["digits"].value == digits
    assert policy.calls == [(1, 2)] * 3  # one batched call of n=2 candidates per learner turn


def test_best_of_n_batches_several_episodes_per_round(env, digit_scorer):
    policy = ScriptedPolicy(["seven", "7"])
    played = BestOfN(digit_scorer, n=2, temperature=None).play_all(
        [env.episodes({"start": s}) for s in (1, 2, 3)], policy
    )
    assert all(p.scores()["digits"].value == 1.0 for p in played)
    assert policy.calls == [(3, 2)] * 3


def test_beam_search_follows_the_prm_and_finishes_the_game(env, digit_scorer, word_scorer):
    start = env.episodes({"start": 300})
    for scorer, expected in ((digit_scorer, "7"), (word_scorer, "seven")):
        beam = BeamSearch(scorer, beam_width=2, n=2, iterations=2, temperature=None)
        played = beam.play(start, ScriptedPolicy(["seven", "7"]))
        trace = played.record()["guidance"]
        assert played.done and [t["candidate"] for t in trace["turns"]] == [expected, expected]
        assert [e["scored"] for e in trace["expansions"]] == [2, 4]  # 1 beam x 2, then 2 beams x 2
        assert all(len(e["kept"]) == 2 for e in trace["expansions"])
    assert not start.done  # beams are clones; the caller's episode is untouched


def test_beam_search_batches_the_beams_of_several_episodes(env, digit_scorer):
    policy = ScriptedPolicy(["seven", "7"])
    beam = BeamSearch(digit_scorer, beam_width=2, n=2, iterations=2, temperature=None)
    played = beam.play_all([env.episodes({"start": s}) for s in (1, 2)], policy)
    # Searched turns follow the PRM; the last turn is finished by the policy's own first sample.
    assert [[m["content"] for m in p.transcript("agent") if m["role"] == "assistant"] for p in played] == [["7", "7", "seven"]] * 2
    assert policy.calls == [(2, 2), (4, 2), (2, 1)]  # 1 beam x 2 episodes, then 2 beams x 2, then finish


def test_random_pick_is_a_uniform_draw_among_the_samples_duplicates_included(env):
    policy = ScriptedPolicy(["7", "seven", "7"])  # "7" is 2 of the 3 samples of every turn
    played = BestOfN(RandomPick(seed=3), n=3, temperature=None).play_all([env.episodes({"start": s}) for s in range(40)], policy)
    turns = [t for p in played for t in p.record()["guidance"]["turns"]]
    chosen = [t["chosen"] for t in turns]
    assert {p.record()["guidance"]["pick"] for p in played} == {"random"}
    assert len(turns) == 120 and set(chosen) == {0, 1, 2}  # every sample gets played sometimes
    share_7 = sum(t["candidates"][t["chosen"]] == "7" for t in turns) / len(turns)
    assert 0.55 < share_7 < 0.8  # 2/3 (a pick among distinct replies would give 1/2)
    again = BestOfN(RandomPick(seed=3), n=3, temperature=None).play_all([env.episodes({"start": s}) for s in range(40)], policy)
    assert [t["chosen"] for p in again for t in p.record()["guidance"]["turns"]] == chosen  # seeded
    assert policy.calls[0] == (40, 3)  # one candidate call per round for all episodes


@pytest.mark.parametrize("strategy", ["best-of-n", "beam"])
def test_policy_reply_puts_the_policys_own_turn_among_the_candidates(env, digit_scorer, strategy):
    """The greedy "7" is what the digit PRM wants, but every sample at T 0.7 is "seven": only with
    ``policy_reply`` can the search play it."""
    def search(policy_reply):
        if strategy == "beam":  # width 1: beams rank by their latest score, so a wider one may keep a "seven" turn
            return BeamSearch(digit_scorer, beam_width=1, n=3, iterations=3, temperature=0.7, policy_reply=policy_reply)
        return BestOfN(digit_scorer, n=3, temperature=0.7, policy_reply=policy_reply)

    policy = ScriptedPolicy(["7"], sampled=["seven"])
    played = search(True).play(env.episodes({"start": 300}), policy)
    trace = played.record()["guidance"]
    assert trace["policy_reply"] is True and played.scores()["digits"].value == 1.0
    if strategy == "best-of-n":
        assert [t["candidates"] for t in trace["turns"]] == [["7", "seven", "seven"]] * 3
        assert policy.calls == [(1, 1), (1, 2)] * 3  # the policy's reply, then n - 1 samples, per turn
    assert policy.temperature == 0.0  # the samples came from a copy
    without = search(False).play(env.episodes({"start": 300}), ScriptedPolicy(["7"], sampled=["seven"]))
    assert without.scores()["digits"].value == 0.0  # all three turns "seven"


def test_a_margin_keeps_the_policys_own_reply_unless_a_candidate_leads_it_by_more(env, digit_scorer):
    """The greedy reply is "seven" and every sample "7", which the digit PRM scores higher: with no
    margin the search plays "7"; a margin at the PRM's lead keeps "seven", one just below it does not."""
    def play(margin):
        search = BestOfN(digit_scorer, n=2, temperature=0.7, policy_reply=True, margin=margin)
        return search.play(env.episodes({"start": 300}), ScriptedPolicy(["seven"], sampled=["7"]))

    plain = play(0.0).record()["guidance"]
    assert [t["candidates"][t["chosen"]] for t in plain["turns"]] == ["7"] * 3
    first = plain["turns"][0]["scores"]
    lead = first[1] - first[0]  # the first turn's context is the same in every run
    assert lead > 0
    at_lead, below = play(lead).record()["guidance"], play(lead / 2).record()["guidance"]
    assert at_lead["margin"] == lead and at_lead["turns"][0]["chosen"] == 0 and below["turns"][0]["chosen"] == 1
    always = play(1.0)  # PRM scores are chances in [0, 1]: no lead exceeds 1
    assert all(t["chosen"] == 0 for t in always.record()["guidance"]["turns"]) and always.scores()["digits"].value == 0.0


def test_outcome_pick_plays_the_candidate_whose_rollout_to_the_end_scored_best(env):
    policy = ScriptedPolicy(["seven", "7"])  # rollouts continue with "seven" (the first sample)
    played = BestOfN(OutcomePick(DIGITS), n=2, temperature=None).play(env.episodes({"start": 300}), policy)
    trace = played.record()["guidance"]
    assert trace["pick"] == "outcome-rollout"
    assert [t["candidates"][t["chosen"]] for t in trace["turns"]] == ["7"] * 3
    # digits = share of turns with a digit, over the game after this candidate and "seven" rollouts
    assert [t["scores"] for t in trace["turns"]] == [[0, 1 / 3], [1 / 3, 2 / 3], [2 / 3, 1]]
    assert played.scores()["digits"].value == 1.0
    # each round: candidates, then both candidates' clones played out together, one call per turn
    assert policy.calls == [(1, 2), (2, 1), (2, 1), (1, 2), (2, 1), (1, 2)]


def test_an_error_in_one_game_stops_that_game_not_the_search(digit_scorer):
    faulty = make_env("count-test", {"rows": 4, "turns": 3, "fail_starts": [2]})  # start=2 raises on turn 2
    searches = [BestOfN(digit_scorer, n=2, temperature=None),
                BestOfN(RandomPick(), n=2, temperature=None),
                BestOfN(OutcomePick(DIGITS), n=2, temperature=None),  # its rollouts of that game stop too
                BeamSearch(digit_scorer, beam_width=2, n=2, iterations=2, temperature=None)]
    for search in searches:
        healthy, broken = search.play_all([faulty.episodes({"start": s}) for s in (1, 2)], ScriptedPolicy(["seven", "7"]))
        assert healthy.done and stop_reason(healthy) is None and healthy.scores()["digits"].value is not None
        assert broken.done and "judge crashed (simulated fault)" in stop_reason(broken)
        assert broken.record()["stopped"] == stop_reason(broken)  # the report carries the reason


def test_guidance_with_the_tiny_model_samples_n_candidates_per_turn(env, digit_scorer, tiny_qwen35):
    from rlplugs.tools.policies import HFPolicy

    policy = HFPolicy(tiny_qwen35, temperature=0.0, max_new_tokens=4, seed=0)
    played = BestOfN(digit_scorer, n=3, temperature=1.0).play(env.episodes({"start": 9}), policy)
    turns = played.record()["guidance"]["turns"]
    assert len(turns) == 3 and all(len(t["candidates"]) == len(t["scores"]) == 3 for t in turns)
    assert policy.temperature == 0.0  # candidates came from a sampling copy; the policy is unchanged
    own = BestOfN(digit_scorer, n=2, temperature=1.0, policy_reply=True).play(env.episodes({"start": 9}), policy)
    greedy = policy.generate([env.episodes({"start": 9}).observation()])[0][0]
    assert own.record()["guidance"]["turns"][0]["candidates"][0] == greedy  # the policy's own reply comes first
    beam = BeamSearch(digit_scorer, beam_width=2, n=2, iterations=1, temperature=1.0)
    assert beam.play(env.episodes({"start": 9}), policy).done


def test_candidates_within_a_nucleus_come_from_it(env, digit_scorer, tiny_qwen35):
    """Candidates at T 1.0 within ``top_p``: a nucleus too small for a second token leaves only the
    most likely one, so every candidate is the greedy reply, while at T 1.0 alone they differ. The
    trace records the nucleus, and the policy itself stays greedy with its own top_p."""
    from rlplugs.tools.policies import HFPolicy

    policy = HFPolicy(tiny_qwen35, temperature=0.0, max_new_tokens=4, seed=0)
    greedy = policy.generate([env.episodes({"start": 9}).observation()])[0][0]
    narrow = BestOfN(digit_scorer, n=3, temperature=1.0, top_p=1e-6).play(env.episodes({"start": 9}), policy)
    first = narrow.record()["guidance"]["turns"][0]
    assert first["candidates"] == [greedy] * 3 and narrow.record()["guidance"]["top_p"] == 1e-6
    wide = BestOfN(digit_scorer, n=3, temperature=1.0).play(env.episodes({"start": 9}), policy)
    assert len(set(wide.record()["guidance"]["turns"][0]["candidates"])) > 1
    assert (policy.temperature, policy.top_p) == (0.0, 1.0)


def test_guidance_registrations_build_from_strict_options(digit_prm):
    registry = get_registry()
    best = registry.get("guidance", "best-of-n").build({"prm": str(digit_prm), "n": 3, "device": "cpu", "top_p": 0.9})
    assert isinstance(best, BestOfN) and (best.n, best.top_p) == (3, 0.9)
    beam = registry.get("guidance", "beam").build({"prm": str(digit_prm), "beam_width": 3, "iterations": 2})
    assert isinstance(beam, BeamSearch) and (beam.beam_width, beam.iterations) == (3, 2)
    with pytest.raises(UnknownOptionError, match="beam_width"):
        registry.get("guidance", "beam").build({"prm": str(digit_prm), "beam_widht": 3})
    with pytest.raises(UnknownOptionError, match="beam_width"):
        registry.get("guidance", "best-of-n").build({"prm": str(digit_prm), "beam_width": 3})
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        registry.get("guidance", "best-of-n").build({"prm": str(digit_prm), "n": 0})
    with pytest.raises(ValueError, match="prm: '/nonexistent/prm' is not a directory"):
        registry.get("guidance", "best-of-n").build({"prm": "/nonexistent/prm"})
    with pytest.raises(ValueError, match="margin keeps the policy's own reply: set policy_reply true as well"):
        registry.get("guidance", "best-of-n").build({"prm": str(digit_prm), "margin": 0.1})
    assert registry.get("guidance", "best-of-n").build({"prm": str(digit_prm), "margin": 0.1, "policy_reply": True}).margin == 0.1
    control = registry.get("guidance", "best-of-n-random").build({"n": 5, "seed": 2, "policy_reply": True})
    assert isinstance(control.scorer, RandomPick) and (control.n, control.scorer.seed, control.policy_reply) == (5, 2, True)
    bound = registry.get("guidance", "best-of-n-outcome").build({"outcome": {"digits": 1}, "temperature": 1.0})
    assert isinstance(bound.scorer, OutcomePick) and bound.scorer.weights == {"digits": 1.0}
    with pytest.raises(UnknownOptionError, match="seed"):
        registry.get("guidance", "best-of-n-random").build({"sed": 2})
    with pytest.raises(ValueError, match="positive weight"):
        registry.get("guidance", "best-of-n-outcome").build({"outcome": {}})


def test_lora_prm_saves_as_adapter_and_merged_with_the_same_scores(env, rows, tmp_path_factory, tiny_qwen35):
    adapter_dir = _train(rows, tmp_path_factory, tiny_qwen35, "lora", lora=True, lora_r=4, keep_adapter=True,
                         max_steps=2)  # fmt: skip
    assert (adapter_dir / "adapter_config.json").exists()
    context = env.episodes({"start": 5}).observation()
    adapter = PRMScorer(adapter_dir)
    from_adapter = adapter.score([context] * 2, ["7", "seven"])
    merged_dir = save_prm(adapter.model, adapter.tokenizer, adapter_dir.parent / "merged")
    assert not (merged_dir / "adapter_config.json").exists()
    from_merged = PRMScorer(merged_dir).score([context] * 2, ["7", "seven"])
    assert from_adapter == pytest.approx(from_merged, abs=1e-4)


def test_prm_cli_labels_trains_and_guides_an_eval(tmp_path, tiny_qwen35):
    from rlplugs.tools.cli import main

    rows_file = tmp_path / "rows.jsonl"
    assert main(["prm", "label", "--env", "count-test", "--env_args", '{"rows": 2}', "--model", str(tiny_qwen35),
                 "--method", "outcome", "--rows", "2", "--max_new_tokens", "4", "--out", str(rows_file)]) == 0  # fmt: skip
    labelled = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert len(labelled) == 2 * 3 and {r["meta"]["env"] for r in labelled} == {"count-test"}
    assert main(["prm", "train", "--data", str(rows_file), "--model", str(tiny_qwen35), "--out", str(tmp_path / "prm"),
                 "--max_steps", "1", "--batch_size", "2", "--lora", "--lora_r", "2"]) == 0  # fmt: skip
    assert json.loads((tmp_path / "prm" / "prm_training.json").read_text())["steps"] == 1
    out = tmp_path / "eval"
    assert main(["eval", "--env", "count-test", "--model", str(tiny_qwen35), "--rows", "1", "--samples", "1",
                 "--max_new_tokens", "4", "--guidance", "best-of-n",
                 "--guidance_args", json.dumps({"n": 2, "prm": str(tmp_path / "prm")}),
                 "--out", str(out)]) == 0  # fmt: skip
    text = "\n".join(p.read_text() for p in out.rglob("*.json*"))
    assert '"strategy": "best-of-n"' in text and '"scores"' in text


def test_prm_label_cli_with_a_greedy_finish_follows_the_greedy_reply(tmp_path, tiny_qwen35):
    from rlplugs import HFPolicy, make_env
    from rlplugs.tools.cli import main

    rows_file = tmp_path / "rows.jsonl"
    assert main(["prm", "label", "--env", "count-test", "--env_args", '{"rows": 1}', "--model", str(tiny_qwen35),
                 "--finish", "greedy", "--policy_reply", "--candidates", "3", "--rows", "1", "--max_new_tokens", "4",
                 "--out", str(rows_file)]) == 0  # fmt: skip
    labelled = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert len(labelled) == 3 * 3 and {r["meta"]["continuations"] for r in labelled} == {1}
    # candidate 0 of every turn is the greedy reply, and the main game plays it: the next turn's context holds it
    greedy = HFPolicy(tiny_qwen35, temperature=0.0, max_new_tokens=4)
    first = {r["meta"]["turn"]: r["messages"] for r in labelled if r["meta"]["candidate_index"] == 0}
    env = make_env("count-test", {"rows": 1})
    context = env.episodes(next(iter(env.dataset("train")))).observation()
    assert first[0][:-1] == context and first[0][-1]["content"] == greedy.generate([context])[0][0]
    for turn in (1, 2):
        assert first[turn][: len(first[turn - 1])] == first[turn - 1]
        assert first[turn][-1]["content"] == greedy.generate([first[turn][:-1]])[0][0]


def test_prm_cli_rejects_bad_input_with_a_usage_error(tmp_path, tiny_qwen35, capsys):
    from rlplugs.tools.cli import USAGE_ERROR, main

    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"messages": [], "label": 0.5}\n')
    assert main(["prm", "train", "--data", str(bad), "--model", str(tiny_qwen35), "--out", str(tmp_path / "p")]) == USAGE_ERROR
    assert "rows.jsonl:1: not a PRM row" in capsys.readouterr().err
    bad.write_text('{"prompt": "x"}\n')  # said "('messages')", a KeyError's text
    assert main(["prm", "train", "--data", str(bad), "--model", str(tiny_qwen35), "--out", str(tmp_path / "p")]) == USAGE_ERROR
    assert "rows.jsonl:1: not a PRM row (no 'messages' or 'label')" in capsys.readouterr().err
    assert main(["prm", "train", "--data", str(tmp_path / "missing.jsonl"), "--model", str(tiny_qwen35),
                 "--out", str(tmp_path / "p")]) == USAGE_ERROR  # fmt: skip
    assert "missing.jsonl: no such file; pass the JSON-lines file `rlplugs prm label --out` wrote" in capsys.readouterr().err
    assert main(["prm", "label", "--env", "count-test", "--model", str(tiny_qwen35), "--outcome", '{"wins": 1}',
                 "--out", str(tmp_path / "l.jsonl")]) == USAGE_ERROR  # fmt: skip
    assert "not components of 'count-test'" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--epochs", "0"], "--epochs 0.0: give a value above 0 (or --max_steps N)"),  # saved the untrained head
    (["--max_length", "0"], "--max_length 0: give a value of at least 1"),  # kept every row whole
    (["--grad_accum", "0"], "--grad_accum 0: give a value of at least 1"),  # a ZeroDivisionError after loading
    (["--max_steps", "0"], "--max_steps 0: give at least 1, or -1 to train --epochs passes"),
    (["--keep_adapter"], "--keep_adapter keeps a LoRA adapter: pass --lora as well"),  # merged weights, no word
    pytest.param(["--bf16"], "--bf16 trains in bfloat16 mixed precision on a GPU, and torch sees none here",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU takes --bf16")),  # refused after loading
])  # fmt: skip
def test_prm_train_refuses_numbers_out_of_range_before_anything_is_written(tmp_path, tiny_qwen35, capsys, args, message):
    from rlplugs.tools.cli import USAGE_ERROR, main

    rows = tmp_path / "rows.jsonl"
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    rows.write_text(json.dumps({"messages": chat, "label": 0.5}) + "\n")
    out = tmp_path / "prm"
    assert main(["prm", "train", "--data", str(rows), "--model", str(tiny_qwen35), "--out", str(out), *args]) == USAGE_ERROR
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_eval_command_plays_the_outcome_control_of_best_of_n(tmp_path, tiny_qwen35, plugin_env):
    import subprocess

    from test_cli import RLPLUGS

    out = tmp_path / "outcome"
    proc = subprocess.run([RLPLUGS, "eval", "--env", "count-test", "--model", str(tiny_qwen35), "--rows", "1", "--samples", "1",
                           "--max_new_tokens", "4", "--guidance", "best-of-n-outcome",
                           "--guidance_args", '{"n": 2, "outcome": {"digits": 1}, "policy_reply": true}', "--out", str(out)],
                          env=plugin_env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (out / "samples.jsonl").read_text()
    assert '"pick": "outcome-rollout"' in text and '"n": 2' in text and '"scores"' in text and '"policy_reply": true' in text
