"""Game rules of clembench-games: feedback, parse rules, aborts with reasons, hand-backs, probes."""

import pytest

from clembench_games import GAMES, instances, new_game
from clembench_games.master import GameEpisode, GameError
from clembench_games.privateshared import cohen_kappa
from clembench_games.referencegame import ORDINALS, show
from clembench_games.taboo import look_alikes
from clembench_games.wordle import feedback
from clembench_games.words import five_letter_dictionary, split_of, targets, words


def episode(game: str, seats=None, partner="perfect", **fields) -> GameEpisode:
    inst = {**instances(game, "validation", 1)[0], **fields}
    g = new_game(inst)
    return GameEpisode(g, tuple(seats or g.seats), partner=partner, seed=1)


def test_wordle_feedback_marks_repeated_letters_like_the_word_game():
    assert feedback("crane", "crane") == ["green"] * 5
    assert feedback("eerie", "there") == ["yellow", "red", "yellow", "red", "green"]
    assert feedback("llama", "hello") == ["yellow", "yellow", "red", "red", "red"]


def guess(word: str, why: str = "trying") -> str:
    return f"explanation: {why}\nguess: {word}"


def test_wordle_scores_by_number_of_guesses_and_hands_back_unknown_words():
    ep = episode("wordle", target="cabin")
    ep.step(guess("zzzzz"))  # not in dictionary: handed back, costs no guess
    assert not ep.done and "not in the game's dictionary" in ep.observation()[-1]["content"]
    for w in ("apple", "bread", "chair"):
        assert w in five_letter_dictionary()
        ep.step(guess(w))
    assert "Feedback: c" in ep.observation()[-1]["content"]
    ep.step("explanation: got it\nGUESS: Cabin")  # the keyword in any case, as in clembench
    m = ep.game.metrics()
    assert (m["Success"], m["Main Score"], m["Aborted"]) == (1.0, 50.0, 0.0)  # won with the 4th guess
    assert ep.scores()["main_score"].value == 0.5


def test_wordle_unknown_words_are_handed_back_five_times_in_a_row_and_the_sixth_aborts():
    ep = episode("wordle", target="cabin")
    for _ in range(5):
        ep.step(guess("zzzzz"))
    ep.step(guess("apple"))  # a valid guess resets the count
    for _ in range(5):
        ep.step(guess("qqqqq"))
    assert not ep.done and ep.game.guesses == ["apple"]
    ep.step(guess("qqqqq"))
    assert ep.game.outcome == "aborted" and ep.game.abort_reason == "6 unknown words in a row: 'qqqqq'"


@pytest.mark.parametrize(("reply", "reason"), [
    (guess("abcdefg"), "guess 'abcdefg' has 7 letters, not 5"),  # wrong length: no hand-back
    (guess("two words"), "guess 'two words' is not a single word of letters"),
    ("guess: crane\nexplanation: x", "reply does not start with 'explanation:'"),
    ("Explanation: x\nguess: crane", "reply does not start with 'explanation:'"),
    ("explanation: x\nguess: crane\nthanks", "reply has more than the 'explanation:' and 'guess:' lines"),
    ("explanation: crane or guess: slate\nguess: crane", "reply does not have exactly one 'guess:'"),
    ("I think the word is crane", "reply does not start with 'explanation:'"),
])
def test_wordle_reply_format_and_word_shape_violations_abort(reply, reason):
    ep = episode("wordle")
    ep.step(reply)
    assert ep.game.outcome == "aborted" and ep.game.abort_reason == reason
    m = ep.game.metrics()
    assert m["Aborted"] == 1 and m["Played"] == 0 and m["Success"] == 0 and m["Lose"] == 0
    assert m["Main Score"] != m["Main Score"]  # NaN, as in clembench
    s = ep.scores()["main_score"]
    assert s.value == 0.0 and s.reason.startswith("aborted: ")  # a real zero, not unscored


def test_wordle_withclue_main_score_is_rounded_to_two_decimals():
    ep = episode("wordle_withclue", target="cabin")
    ep.step(guess("apple"))
    ep.step(guess("bread"))
    ep.step(guess("cabin"))
    assert ep.game.metrics()["Main Score"] == 33.33


def test_wordle_withcritic_alternates_and_the_critic_sees_no_letter_feedback():
    ep = episode("wordle_withcritic")
    target = ep.game.target
    other = next(w for w in ("apple", "bread", "chair") if w != target)
    assert ep.current_seat == "guesser"
    ep.step(guess(other, "fruit"))
    critic_view = ep.observation()[-1]["content"]
    assert ep.current_seat == "critic" and f"Proposed guess: {other}\nExplanation: fruit" in critic_view
    ep.step("explanation: wrong letter\nagreement: no")
    assert ep.current_seat == "guesser" and "critic disagrees" in ep.observation()[-1]["content"]
    ep.step(guess(other, "keeping it"))  # committed: scored, feedback goes to the guesser only
    assert "Feedback:" in ep.observation()[-1]["content"]
    ep.step(guess(target, "changed my mind"))
    assert "Feedback" not in ep.observation()[-1]["content"] and "Feedback" not in str(ep.transcript("critic"))
    ep.step("explanation: fits\nagreement: yes")
    ep.step(guess(target))
    assert ep.game.outcome == "success" and ep.game.main_score() == 50.0
    ep = episode("wordle_withcritic")
    ep.step(guess("apple"))
    ep.step("AGREEMENT: yes")
    assert ep.game.abort_reason == "critic reply does not start with 'explanation:'"
    ep = episode("wordle_withcritic")
    ep.step(guess("apple"))
    ep.step("explanation: hm\nagreement: maybe")
    assert ep.game.abort_reason == "critic agreement is not yes or no"


def test_taboo_clue_with_a_form_of_a_banned_word_is_a_played_loss_not_an_abort():
    ep = episode("taboo", target="lantern", taboo=look_alikes("lantern"))
    ep.step("CLUE: two lanterns hanging")
    assert ep.game.outcome == "failure" and ep.game.log[-1] == "failure: clue uses a taboo word: 'lanterns'"
    m = ep.game.metrics()
    assert (m["Played"], m["Aborted"], m["Lose"], m["Main Score"]) == (1.0, 0.0, 1.0, 0.0)
    ep = episode("taboo", target="running", taboo=["planter"])
    ep.step("CLUE: what a runner does, or a nose when you have a cold: it runs")  # Snowball: run, runner
    assert ep.game.outcome == "failure" and "'runs'" in ep.game.log[-1]
    ep = episode("taboo", target="lantern", taboo=["planter", "anteater", "antechamber"])
    ep.step("CLUE: an ante-chamber light")  # punctuation deleted before stemming, as in clembench
    assert ep.game.outcome == "failure" and "'antechamber'" in ep.game.log[-1]


def test_taboo_guess_is_the_reply_after_the_prefix_and_several_words_are_just_wrong():
    ep = episode("taboo", seats=("describer", "guesser"), target="lantern", taboo=["planter"])
    for g in ("a big lamp", "torch", "candle"):
        ep.step("CLUE: a light you carry")
        ep.step(f"GUESS: {g}")
    assert ep.game.outcome == "failure" and ep.game.guesses == ["a big lamp", "torch", "candle"]
    assert ep.game.metrics()["Lose"] == 1.0 and ep.game.main_score() == 0
    m = ep.game.metrics()  # one request per round (clue + guess), as clembench counts
    assert (m["Request Count"], m["Parsed Request Count"], m["Violated Request Count"]) == (3.0, 3.0, 0.0)
    ep = episode("taboo", target="lantern", taboo=["planter"])
    ep.step("CLUE: a light you carry")
    ep.step("GUESS: Lantern!")
    assert ep.game.outcome == "success" and ep.game.main_score() == 100.0


@pytest.mark.parametrize(("seat_replies", "reason"), [
    (["clue: a light"], "describer reply does not start with 'CLUE:'"),
    (["My clue. CLUE: a light"], "describer reply does not start with 'CLUE:'"),
    (["CLUE: a light", "guess: lamp"], "guesser reply does not start with 'GUESS:'"),
])
def test_taboo_replies_must_start_with_their_prefix(seat_replies, reason):
    ep = episode("taboo", target="lantern", taboo=["planter"])
    for reply in seat_replies:
        ep.step(reply)
    assert ep.game.outcome == "aborted" and ep.game.abort_reason == reason
    m = ep.game.metrics()
    assert (m["Request Count"], m["Parsed Request Count"], m["Violated Request Count"]) == (1.0, 0.0, 1.0)


@pytest.mark.parametrize("clue", ["CLUE: n r e t n a l", "CLUE: read it backwards: nretnal",
                                  "CLUE: spelled out: L, A, N, T, E, R, N!", "CLUE: a _ then n.r.e.t.n.a.l"])
def test_taboo_clue_that_spells_the_target_loses_unless_the_spelling_check_is_off(clue):
    ep = episode("taboo", target="lantern", taboo=["planter"])
    ep.step(clue)
    assert ep.game.outcome == "failure" and ep.game.log[-1].startswith("failure: clue uses a taboo word")
    ep = episode("taboo", target="lantern", taboo=["planter"], rule_options={"taboo_spelling_check": False})
    ep.step(clue)  # clembench's stem check alone does not see it
    assert not ep.done and ep.current_seat == "guesser"


def test_taboo_stopwords_option_drops_words_before_the_check():
    ep = episode("taboo", target="will", taboo=["planter"])
    ep.step("CLUE: you will leave it to your heirs")
    assert ep.game.outcome == "failure"
    ep = episode("taboo", target="will", taboo=["planter"], rule_options={"taboo_stopwords": ["will", "you"]})
    ep.step("CLUE: you will leave it to your heirs")
    assert not ep.done


def test_taboo_scripted_players_win_without_spelling_the_target():
    from clembench_games.reference import reference_policy
    from rlplugs.episode import play

    ep = episode("taboo", seats=("describer", "guesser"), target="lantern", taboo=["planter"])
    clue = ep.game.perfect("describer", ep.observation(), None)
    assert clue == "CLUE: a noun that fits the pattern: l _ _ _ _ _ n" and not ep.game.taboo_hits(clue)
    record = play(episode("taboo", seats=("describer", "guesser"), target="lantern", taboo=["planter"]),
                  reference_policy).record()
    clues = [t["response"] for t in record["turns"] if t["seat"] == "describer"]
    assert record["outcome"] == "success" and all("l _" in c for c in clues)


def test_referencegame_giver_sees_the_target_first_and_the_follower_another_order():
    for i in range(3):
        ep = episode("referencegame", seats=("giver", "follower"), target_index=i)
        giver_view = ep.observation()[-1]["content"]
        assert "The target is the first grid" in giver_view
        assert "\n\nfirst grid:\n" + show(ep.game.target) + "\n\nsecond grid:" in giver_view
    ep.step("EXPRESSION: the one with a full top row")
    follower_view = ep.observation()[-1]["content"]
    assert "Expression: the one with a full top row" in follower_view and "target" not in follower_view


@pytest.mark.parametrize("answer", ["ANSWER: {o}", "answer: {o} grid.", "ANSWER: {n}", "ANSWER: {n}\n\n"])
def test_referencegame_follower_may_name_the_grid_by_number_and_add_text_on_its_line(answer):
    ep = episode("referencegame", seats=("giver", "follower"))
    ep.step("EXPRESSION: the one with a full top row\n")
    index = ep.game.follower_grids.index(ep.game.target)
    ep.step(answer.format(o=ORDINALS[index], n=index + 1))
    assert ep.game.outcome == "success"


@pytest.mark.parametrize(("replies", "reason"), [
    (["EXPRESSION: the top row\nbecause it is full"], "giver reply is not one line starting with 'EXPRESSION:'"),
    (["Sure. EXPRESSION: the top row"], "giver reply is not one line starting with 'EXPRESSION:'"),
    (["EXPRESSION: the top row", "ANSWER: fourth"], "follower reply is not one line 'ANSWER: first|second|third'"),
    (["EXPRESSION: the top row", "ANSWER: first\nit has a full row"], "follower reply is not one line 'ANSWER: first|second|third'"),
])
def test_referencegame_replies_are_single_lines_and_an_abort_leaves_success_undefined(replies, reason):
    ep = episode("referencegame", seats=("giver", "follower"))
    for reply in replies:
        ep.step(reply)
    assert ep.game.abort_reason == reason
    m = ep.game.metrics()
    assert m["Aborted"] == 1 and m["Success"] != m["Success"] and m["Lose"] != m["Lose"]  # NaN, as in clembench


def test_privateshared_probes_five_slots_before_the_first_question_and_after_each_answer():
    ep = episode("privateshared")
    slots = ep.game.slots
    assert len(slots) == 5
    for s in slots:  # the probe round before the first question: nothing is known yet
        assert s["slot"] in ep.observation()[-1]["content"] and "ASIDE:" in ep.observation()[-1]["content"]
        ep.step("ASIDE: no")
    assert ep.observation()[-1]["content"].startswith("QUESTION:")
    ep.step(f"ANSWER: {slots[0]['value']}, and my {slots[1]['slot']} is {slots[1]['value']}")
    for i in range(5):  # slot 0 was asked, slot 1 given away early: both known
        ep.step("ASIDE: yes" if i < 2 else "ASIDE: No, not yet.")
    assert ep.game.probe_truth == ep.game.probe_answers == [False] * 5 + [True, True, False, False, False]
    assert len(ep.transcript("answerer")) == 2 * 11  # the seat's chat only grows (adapters need that)


def test_privateshared_probe_is_asked_again_up_to_five_tries_and_answers_are_single_lines():
    ep = episode("privateshared")
    for bad in ("ANSWER: no", "ASIDE: perhaps", "ASIDE: no\nbecause", "no"):
        ep.step(bad)
        assert not ep.done and "try" in ep.observation()[-1]["content"]
    ep.step("ASIDE: no")  # the fifth try: valid, the next probe starts afresh
    assert ep.game.probe_answers == [False]
    for _ in range(5):
        ep.step("ASIDE: maybe")
    assert ep.game.abort_reason == "probe answered 5 times without one line 'ASIDE: yes|no'"
    ep = episode("privateshared")
    for _ in range(5):
        ep.step("ASIDE: no")
    ep.step(f"ANSWER: {ep.game.slots[0]['value']}\nAnything else?")
    assert ep.game.abort_reason == "reply is not one line starting with 'ANSWER:'"
    assert cohen_kappa([True, False, True, False], [True, False, True, False]) == 1.0
    assert cohen_kappa([True, True], [True, True]) == 1.0
    assert cohen_kappa([True, False, True, False], [True, True, False, False]) == 0.0


def test_rule_options_unknown_key_is_an_error_with_a_suggestion():
    from rlplugs.registry import make_env

    with pytest.raises(Exception, match="taboo_spelling_check"):
        make_env("clembench-games", {"rule_options": {"taboo_speling_check": False}})


def test_every_observation_extends_the_seats_previous_chat_in_every_game():
    for game in GAMES:
        for style in ("perfect", "random"):
            g = new_game(instances(game, "validation", 1)[0])
            ep = GameEpisode(g, g.seats, partner=style, seed=3)
            seen = {}
            while not ep.done:
                seat, obs = ep.current_seat, ep.observation()
                if seat in seen:
                    assert obs[: len(seen[seat])] == seen[seat], (game, seat)
                reply = (g.perfect if style == "perfect" else g.random)(seat, obs, ep.rng)
                ep.step(reply)
                seen[seat] = [*obs, {"role": "assistant", "content": reply}]


def test_driving_a_finished_episode_is_an_error_not_a_silent_no_op():
    ep = episode("wordle")
    ep.step("nonsense")
    with pytest.raises(GameError):
        ep.step(guess("crane"))
    with pytest.raises(GameError):
        ep.observation()


def test_scripted_partner_plays_its_seat_so_the_policy_always_acts_on_a_trained_seat():
    ep = episode("taboo", seats=("guesser",))
    assert ep.current_seat == "guesser" and ep.turns[0].seat == "describer"
    assert "fits the pattern" in ep.observation()[-1]["content"]
    clone = ep.clone()
    clone.step(f"GUESS: {clone.game.target}")
    assert clone.done and not ep.done  # clones are independent


def test_word_splits_are_disjoint_and_every_game_has_test_instances():
    for kind in ("noun", "adjective", "verb"):
        assert words(kind) and all(w.isalpha() and w.islower() for w in words(kind))
    train, test = set(targets("noun", "train")), set(targets("noun", "test"))
    assert train and test and not train & test and all(split_of(w) == "test" for w in test)
    for game in GAMES:
        test_ids = [i["instance_id"] for i in instances(game, "test")]
        assert test_ids and len(set(test_ids)) == len(test_ids)
        assert instances(game, "test") == instances(game, "test")  # fixed by seed
