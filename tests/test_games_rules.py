"""Game rules of clembench-games: feedback, parse rules, aborts with reasons, hand-backs, probes."""

import pytest

from clembench_games import GAMES, instances, new_game
from clembench_games.master import GameEpisode, GameError
from clembench_games.privateshared import cohen_kappa
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


def test_wordle_scores_by_number_of_guesses_and_hands_back_unknown_words():
    ep = episode("wordle", target="cabin")
    ep.step("GUESS: zzzzz\nEXPLANATION: x")  # not in dictionary: handed back, costs no guess
    assert not ep.done and "not in the game's dictionary" in ep.observation()[-1]["content"]
    for w in ("apple", "bread", "chair"):
        assert w in five_letter_dictionary()
        ep.step(f"GUESS: {w}\nEXPLANATION: trying")
    assert "Feedback: c" in ep.observation()[-1]["content"]
    ep.step("GUESS: cabin\nEXPLANATION: got it")
    m = ep.game.metrics()
    assert (m["Success"], m["Main Score"], m["Aborted"]) == (1.0, 50.0, 0.0)  # won with the 4th guess
    assert ep.scores()["main_score"].value == 0.5


def test_wordle_third_invalid_word_and_missing_format_abort_with_reason():
    ep = episode("wordle")
    for _ in range(3):
        ep.step("GUESS: abcdefg")
    assert ep.done and ep.game.abort_reason.startswith("third invalid word")
    ep = episode("wordle")
    ep.step("I think the word is crane")
    assert ep.game.outcome == "aborted" and ep.game.abort_reason == "reply has no 'GUESS:' line"
    m = ep.game.metrics()
    assert m["Aborted"] == 1 and m["Played"] == 0 and m["Success"] == 0 and m["Lose"] == 0
    assert m["Main Score"] != m["Main Score"]  # NaN, as in clembench
    s = ep.scores()["main_score"]
    assert s.value == 0.0 and s.reason.startswith("aborted: ")  # a real zero, not unscored


def test_wordle_withcritic_alternates_guesser_critic_guesser_and_critic_must_say_yes_or_no():
    ep = episode("wordle_withcritic")
    target = ep.game.target
    assert ep.current_seat == "guesser"
    ep.step("GUESS: apple\nEXPLANATION: fruit")
    assert ep.current_seat == "critic" and "Proposed guess: apple" in ep.observation()[-1]["content"]
    ep.step("AGREEMENT: no\nEXPLANATION: wrong letter")
    assert ep.current_seat == "guesser" and "critic disagrees" in ep.observation()[-1]["content"]
    ep.step(f"GUESS: {target}\nEXPLANATION: changed my mind")
    assert ep.game.outcome == "success" and ep.game.main_score() == 100.0
    ep = episode("wordle_withcritic")
    ep.step("GUESS: apple")
    ep.step("maybe")
    assert ep.game.abort_reason == "critic reply has no 'AGREEMENT: yes|no' line"


def test_taboo_clue_with_a_form_of_the_target_aborts_and_three_wrong_guesses_lose():
    ep = episode("taboo", target="lantern", taboo=look_alikes("lantern"))
    ep.step("CLUE: two lanterns hanging")
    assert ep.game.abort_reason == "clue uses a taboo word: 'lanterns'"
    ep = episode("taboo", target="lantern", taboo=["planter", "anteater", "antechamber"])
    ep.step("CLUE: an antechamber light")
    assert ep.game.abort_reason == "clue uses a taboo word: 'antechamber'"
    ep = episode("taboo", seats=("describer", "guesser"), target="lantern", taboo=["planter"])
    for guess in ("lamp", "torch", "candle"):
        ep.step("CLUE: a light you carry")
        ep.step(f"GUESS: {guess}")
    assert ep.game.outcome == "failure" and ep.game.metrics()["Lose"] == 1.0 and ep.game.main_score() == 0
    ep = episode("taboo", target="lantern", taboo=["planter"])
    ep.step("CLUE: a light you carry")
    ep.step("GUESS: a big lamp")
    assert ep.game.abort_reason == "guess 'a big lamp' is not a single word"


@pytest.mark.parametrize("clue", ["CLUE: l-a-n-t-e-r-n", "CLUE: n r e t n a l", "CLUE: read it backwards: nretnal",
                                  "CLUE: spelled out: L, A, N, T, E, R, N!", "CLUE: a _ then n.r.e.t.n.a.l"])
def test_taboo_clue_that_spells_the_target_forwards_or_backwards_aborts(clue):
    ep = episode("taboo", target="lantern", taboo=["planter"])
    ep.step(clue)
    assert ep.game.outcome == "aborted" and ep.game.abort_reason.startswith("clue uses a taboo word")


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


def test_referencegame_follower_sees_grids_in_another_order_and_must_name_one():
    ep = episode("referencegame", seats=("giver", "follower"))
    giver_view = ep.observation()[-1]["content"]
    ep.step("EXPRESSION: the one with a full top row")
    follower_view = ep.observation()[-1]["content"]
    assert "Expression: the one with a full top row" in follower_view and "target" not in follower_view
    assert "The target is the" in giver_view
    ep.step("ANSWER: fourth")
    assert ep.game.abort_reason == "follower reply has no 'ANSWER: first|second|third' line"


def test_privateshared_probes_every_slot_after_each_answer_and_kappa_scores_them():
    ep = episode("privateshared")
    slots = ep.game.slots
    ep.step(f"ANSWER: {slots[0]['value']}")
    assert "Aside" in ep.observation()[-1]["content"] and slots[0]["slot"] in ep.observation()[-1]["content"]
    ep.step("ANSWER: yes")  # slot 0 was just shared: right
    assert slots[1]["slot"] in ep.observation()[-1]["content"]
    assert len(ep.transcript("answerer")) == 4  # the seat's chat only grows (adapters need that)
    ep.step("ANSWER: perhaps")
    assert ep.game.abort_reason == "probe answer 'perhaps' is not yes or no"
    assert cohen_kappa([True, False, True, False], [True, False, True, False]) == 1.0
    assert cohen_kappa([True, True], [True, True]) == 1.0
    assert cohen_kappa([True, False, True, False], [True, True, False, False]) == 0.0


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
        ep.step("GUESS: crane")
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
