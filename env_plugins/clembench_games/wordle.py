"""Wordle and its two clembench variants, written from the public rules of the word game.

- ``wordle``: one player finds a secret five-letter word in at most six guesses; after each guess
  every letter is marked green (right place), yellow (in the word elsewhere) or red (absent, or
  no more copies). Main Score by the number of guesses a win took: 1-3 -> 100, 4 -> 50, 5 -> 30,
  6 -> 20; a loss scores 0.
- ``wordle_withclue``: the same, plus a clue about the word; Main Score 100 / guesses.
- ``wordle_withcritic``: a second player, the critic, sees the clue and each proposed guess with
  its explanation and says whether it agrees; the guesser then commits to a final guess for the
  round (it may keep or change it). Main Score 100 / rounds.

Parse rules (clembench 2.0's): a reply starts with ``explanation:``, has at most two lines and
exactly one ``guess:`` (the critic: ``agreement:`` with yes or no); anything else aborts, and so
does a guess that is not one word of letters or not five letters long. A five-letter word outside
the game's dictionary is handed back with the reason and costs no guess; the sixth such word in a
row aborts (a valid guess resets the count). The critic sees the clue, the proposed guess and its
explanation, not the letter feedback. Main Scores of the two variants are rounded to 2 decimals.
"""

from __future__ import annotations

import random
import re
from typing import ClassVar

from clembench_games.master import GameMaster, Message
from clembench_games.words import five_letter_dictionary

MAX_GUESSES = 6
MAX_UNKNOWN_IN_A_ROW = 5  # unknown words handed back in a row; one more aborts
_WORDLE_SCORES = {1: 100, 2: 100, 3: 100, 4: 50, 5: 30, 6: 20}
_ORDINALS = ("first", "second", "third", "fourth", "fifth")

_GUESSER_RULES = (
    "Let's play Wordle. Find my secret five-letter English word in at most {max_guesses} guesses.\n"
    "Answer in exactly this format, two lines, nothing else:\n"
    "explanation: <one short sentence>\n"
    "guess: <one five-letter word>\n"
    "For example:\nexplanation: a common word with frequent letters.\nguess: house\n"
    "After every guess I mark each letter: green = right letter in the right place, yellow = in the "
    "word but elsewhere, red = not in the word (or no more copies of it). A word my dictionary does "
    "not know is handed back and costs no guess, but the sixth such word in a row ends the game; "
    "a word that is not five letters ends it at once."
)


def feedback(guess: str, target: str) -> list[str]:
    """Colour per letter, with repeated letters handled as in the word game (greens first)."""
    colours = ["red"] * len(guess)
    spare: dict[str, int] = {}
    for i, (g, t) in enumerate(zip(guess, target, strict=True)):
        if g == t:
            colours[i] = "green"
        else:
            spare[t] = spare.get(t, 0) + 1
    for i, g in enumerate(guess):
        if colours[i] != "green" and spare.get(g, 0) > 0:
            colours[i] = "yellow"
            spare[g] -= 1
    return colours


def describe(guess: str, colours: list[str]) -> str:
    return ", ".join(f"{g} {c}" for g, c in zip(guess, colours, strict=True))


def parse_reply(text: str, key: str) -> tuple[str, str] | str:
    """``(value of key, explanation)`` of a reply in the ``explanation:`` / ``key:`` format, or
    the reason it is not one."""
    if not text.startswith("explanation:"):
        return "reply does not start with 'explanation:'"
    if len(text.strip().split("\n")) > 2:
        return f"reply has more than the 'explanation:' and '{key}:' lines"
    values = re.findall(rf"{key}:([^\n]*)", text, re.IGNORECASE)
    if len(values) != 1:
        return f"reply does not have exactly one '{key}:'"
    explanation = re.search(r"explanation:([^\n]*)", text, re.IGNORECASE)
    return values[0].strip().lower(), explanation.group(1).strip()


def make_clue(target: str, kind: str, rng: random.Random) -> dict:
    """A clue the critic can check: the part of speech and one revealed letter."""
    pos = rng.randrange(len(target))
    article = "an" if kind[0] in "aeiou" else "a"
    return {"clue": f"{article} {kind} whose {_ORDINALS[pos]} letter is '{target[pos]}'", "clue_pos": pos}


class Wordle(GameMaster):
    name: ClassVar[str] = "wordle"
    seats: ClassVar[tuple[str, ...]] = ("guesser",)
    rules: ClassVar[dict[str, str]] = {"guesser": _GUESSER_RULES}

    def __init__(self, instance: dict):
        super().__init__({"max_guesses": MAX_GUESSES, **instance})
        self.target: str = instance["target"]
        self.guesses: list[str] = []
        self.unknown_in_a_row = 0
        self.explanation = ""  # of the last parsed guess

    def opening(self) -> None:
        self.ask("guesser", "Make your first guess.")

    def main_score(self) -> float:
        if self.outcome != "success":
            return 0.0
        return float(_WORDLE_SCORES[len(self.guesses)])

    # --- parsing shared by the variants -----------------------------------------------------
    def parse_guess(self, seat: str, text: str) -> str | None:
        """The guessed word, or None after handing it back / aborting (the reason is recorded)."""
        parsed = parse_reply(text, "guess")
        if isinstance(parsed, str):
            self.abort(parsed)
            return None
        word, self.explanation = parsed
        if not word.isalpha():
            self.abort(f"guess {word!r} is not a single word of letters")
            return None
        if len(word) != 5:
            self.abort(f"guess '{word}' has {len(word)} letters, not 5")
            return None
        if word in five_letter_dictionary():
            self.unknown_in_a_row = 0
            return word
        self.unknown_in_a_row += 1
        if self.unknown_in_a_row > MAX_UNKNOWN_IN_A_ROW:
            self.abort(f"{self.unknown_in_a_row} unknown words in a row: '{word}'")
        else:
            self.log.append(f"handed back: '{word}' is not in the game's dictionary")
            self.ask(seat, f"Invalid guess: '{word}' is not in the game's dictionary. It costs no guess; "
                           "try another word in the same format.")
        return None

    def score_guess(self, word: str) -> str | None:
        """Apply a committed guess; returns the feedback text, or None when the game ended."""
        self.guesses.append(word)
        if word == self.target:
            self.win(f"found '{word}' in {len(self.guesses)} guesses")
            return None
        if len(self.guesses) >= MAX_GUESSES:
            self.lose(f"no guess left; the word was '{self.target}'")
            return None
        left = MAX_GUESSES - len(self.guesses)
        return f"Feedback: {describe(word, feedback(word, self.target))}. {left} guess{'es' if left > 1 else ''} left."

    def on_reply(self, seat: str, text: str) -> None:
        word = self.parse_guess(seat, text)
        if word is not None:
            note = self.score_guess(word)
            if note:
                self.ask("guesser", note + " Make your next guess.")

    # --- scripted players ---------------------------------------------------------------------
    def perfect(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        """An oracle (upper bound): it reads the secret word."""
        return f"explanation: it is the secret word.\nguess: {self.target}"

    def random(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        return f"explanation: a random word.\nguess: {rng.choice(sorted(five_letter_dictionary()))}"


class WordleWithClue(Wordle):
    name: ClassVar[str] = "wordle_withclue"
    rules: ClassVar[dict[str, str]] = {"guesser": _GUESSER_RULES + "\nClue: the word is {clue}."}

    def main_score(self) -> float:
        return round(100.0 / len(self.guesses), 2) if self.outcome == "success" else 0.0


_CRITIC_RULES = (
    "We play Wordle together. Another player tries to find a secret five-letter word in at most "
    "{max_guesses} guesses; you are the critic. Clue: the word is {clue}. I show you each proposed "
    "guess with its explanation; tell the guesser whether you agree that it could be the word.\n"
    "Answer in exactly this format, two lines, nothing else:\n"
    "explanation: <one short sentence>\n"
    "agreement: <yes or no>\n"
    "For example:\nexplanation: the clue says the second letter is 'u'.\nagreement: no"
)


class WordleWithCritic(WordleWithClue):
    name: ClassVar[str] = "wordle_withcritic"
    seats: ClassVar[tuple[str, ...]] = ("guesser", "critic")
    rules: ClassVar[dict[str, str]] = {
        "guesser": WordleWithClue.rules["guesser"]
        + "\nA critic comments on each guess before you commit to your final guess for the round.",
        "critic": _CRITIC_RULES,
    }

    def __init__(self, instance: dict):
        super().__init__(instance)
        self.proposal: str | None = None  # the guess the critic is judging

    def on_reply(self, seat: str, text: str) -> None:
        if seat == "critic":
            parsed = parse_reply(text, "agreement")
            if isinstance(parsed, str) or parsed[0] not in ("yes", "no"):
                self.abort(f"critic {parsed if isinstance(parsed, str) else 'agreement is not yes or no'}")
                return
            verdict, why = parsed
            self.ask(
                "guesser",
                f"The critic {'agrees' if verdict == 'yes' else 'disagrees'}: {why}\n"
                "Now give your final guess for this round (keep it or change it), same format.",
            )
            return
        word = self.parse_guess(seat, text)
        if word is None:
            return
        if self.proposal is None:  # first proposal of the round goes to the critic (without the feedback)
            self.proposal = word
            self.ask("critic", f"Proposed guess: {word}\nExplanation: {self.explanation}")
            return
        self.proposal = None
        note = self.score_guess(word)
        if note:
            self.ask("guesser", note + " Propose your next guess.")

    def consistent(self, word: str) -> bool:
        """Whether ``word`` fits the clue and all feedback so far (what an ideal critic checks)."""
        pos = self.instance["clue_pos"]
        if word[pos] != self.target[pos]:
            return False
        return all(feedback(g, word) == feedback(g, self.target) for g in self.guesses)

    def perfect(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        if seat == "guesser":
            return super().perfect(seat, messages, rng)
        ok = self.consistent(self.proposal)
        return f"explanation: it {'fits' if ok else 'contradicts'} the clue and feedback.\nagreement: {'yes' if ok else 'no'}"

    def random(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        if seat == "guesser":
            return super().random(seat, messages, rng)
        return f"explanation: a coin flip.\nagreement: {rng.choice(['yes', 'no'])}"
