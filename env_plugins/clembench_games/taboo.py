"""Taboo, written from the public rules of the party game.

The describer knows a target word and a few taboo words; it describes the target without saying
the target or any taboo word (nor a form of them); the guesser answers with one word. At most
three rounds; after a wrong guess the describer gives another clue. Main Score 100 / rounds on a
win, 0 on a loss.

Parse rules: the describer's reply must carry a ``CLUE:`` line, the guesser's a ``GUESS:`` line
with a single word; a clue that uses the target or a taboo word (a word sharing its stem: the
first ``max(4, len - 2)`` letters) breaks the rules. All of these abort the episode.

Taboo words: ``wonderwords`` ships no word relations, so the taboo list is the nouns that look
most like the target (most shared letter pairs) - a spelling constraint rather than a semantic
one, stated here so no one mistakes it for clembench's related-word lists.
"""

from __future__ import annotations

import functools
import random
import re
from typing import ClassVar

from clembench_games.master import GameMaster, Message, prefixed
from clembench_games.words import words

MAX_ROUNDS = 3
#: Phrases the perfect describer can introduce its reversed spelling with; it takes the first one
#: that uses no taboo word (the target itself can be "word", "letter", ...).
_SPELL_CODES = ("spelled backwards", "reversed spelling", "read right to left")
_SPELL = re.compile(r"(?:" + "|".join(_SPELL_CODES) + r"): ([a-z](?: [a-z])+)")


def stem(word: str) -> str:
    return word[: max(4, len(word) - 2)]


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _pairs(word: str) -> frozenset[str]:
    return frozenset(word[i : i + 2] for i in range(len(word) - 1))


@functools.cache
def _noun_pairs() -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple((w, _pairs(w)) for w in words("noun") if len(w) >= 4)


def look_alikes(target: str, n: int = 3) -> list[str]:
    """The ``n`` nouns sharing most letter pairs with ``target`` (ties broken alphabetically)."""
    mine = _pairs(target)
    ranked = sorted(
        (w for w, p in _noun_pairs() if mine & p and stem(w) != stem(target)),
        key=lambda w: (-len(mine & _pairs(w)), w),
    )
    return ranked[:n]


class Taboo(GameMaster):
    name: ClassVar[str] = "taboo"
    seats: ClassVar[tuple[str, ...]] = ("describer", "guesser")
    rules: ClassVar[dict[str, str]] = {
        "describer": (
            "We play Taboo. You describe a word to another player, who must guess it within "
            f"{MAX_ROUNDS} tries. Your word: {{target}}. Do not use the word itself or any of these "
            "words, nor any form of them: {taboo_list}.\n"
            "Answer in exactly this format, nothing else:\n"
            "CLUE: <your description>\n"
            "For example, for the word apple:\nCLUE: a round fruit that grows on trees"
        ),
        "guesser": (
            "We play Taboo. Another player describes a secret word without saying it; you have "
            f"{MAX_ROUNDS} tries to guess it.\n"
            "Answer in exactly this format, nothing else:\n"
            "GUESS: <one word>\n"
            "For example:\nGUESS: table"
        ),
    }

    def __init__(self, instance: dict):
        super().__init__({"taboo_list": ", ".join(instance["taboo"]), **instance})
        self.target: str = instance["target"]
        self.guesses: list[str] = []
        self.clues: list[str] = []

    def opening(self) -> None:
        self.ask("describer", "Give your first clue. Reply with CLUE: <your description>")

    def taboo_hits(self, clue: str) -> list[str]:
        """Words of ``clue`` that are the target, a taboo word, or a form of one (same stem)."""
        banned = {stem(w) for w in [self.target, *self.instance["taboo"]]}
        return [t for t in tokens(clue) if any(t.startswith(b) or stem(t) == b for b in banned)]

    def main_score(self) -> float:
        return 100.0 / len(self.guesses) if self.outcome == "success" else 0.0

    def on_reply(self, seat: str, text: str) -> None:
        if seat == "describer":
            clue = prefixed(text, "clue")
            if not clue:
                self.abort("describer reply has no 'CLUE:' line")
                return
            used = self.taboo_hits(clue)
            if used:
                self.abort(f"clue uses a taboo word: {used[0]!r}")
                return
            self.clues.append(clue)
            self.ask("guesser", f"CLUE: {clue}\nReply with GUESS: <one word>")
            return
        raw = prefixed(text, "guess")
        if raw is None:
            self.abort("guesser reply has no 'GUESS:' line")
            return
        guess = raw.strip(" .!\"'`*").lower()
        if len(guess.split()) != 1 or not guess.isalpha():
            self.abort(f"guess {raw!r} is not a single word")
            return
        self.guesses.append(guess)
        if guess == self.target:
            self.win(f"guessed '{guess}' in round {len(self.guesses)}")
        elif len(self.guesses) >= MAX_ROUNDS:
            self.lose(f"'{guess}' was wrong and no round is left")
        else:
            self.ask("describer", f"The guess was '{guess}', which is wrong. Give another clue.")

    # --- scripted players ---------------------------------------------------------------------
    def perfect(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        """Perfect describer spells the word backwards; perfect guesser decodes that spelling.
        Each only uses what its own seat sees."""
        if seat == "describer":
            code = next((c for c in _SPELL_CODES if not self.taboo_hits(c)), _SPELL_CODES[0])
            return f"CLUE: {code}: " + " ".join(reversed(self.target))
        spelled = _SPELL.search(messages[-1]["content"])
        guess = "".join(reversed(spelled.group(1).split())) if spelled else rng.choice(words("noun"))
        return f"GUESS: {guess}"

    def random(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        if seat == "describer":
            safe = [w for w in rng.sample(words("noun"), 20) if not self.taboo_hits(w)]
            return "CLUE: " + " ".join(safe[:3])
        return f"GUESS: {rng.choice(words('noun'))}"
