"""Taboo, written from the public rules of the party game, played by clembench 2.0's rules.

The describer knows a target word and a few taboo words; it describes the target without saying
the target or any taboo word (nor a form of them); the guesser answers with one word. At most
three rounds; after a wrong guess the describer gives another clue. Main Score 100 / rounds on a
win, 0 on a loss.

Parse rules (clembench 2.0's): a describer reply must start with ``CLUE:``, a guesser reply with
``GUESS:``; anything else aborts. The guess is the rest of the reply, lower-cased, without
punctuation; a guess of several words is not an abort, it is just not the target. A clue breaks
the taboo when one of its words has the Snowball (Porter2) stem of the target or a taboo word:
that is a *played loss* (Main Score 0), not an abort. Stems come from the ``snowballstemmer``
package, the same English algorithm as NLTK's ``SnowballStemmer``.

One rule of our own (:class:`~clembench_games.rule_options.RuleOptions`, ``taboo_spelling_check``,
on by default): a clue word that is a banned word written backwards (``nretnal``) or a run of
single letters that spells one either way (``l a n t e r n``, ``n.r.e.t.n.a.l``) breaks the taboo
too; clembench's stem check alone lets a describer win by spelling the target. The scripted players
win without spelling: the perfect guesser is an oracle (an upper bound, like wordle's), and the
describers give a crossword pattern (length, first letter, one more letter at the end each round)
that never shows the whole word.

Taboo words: ``wonderwords`` ships no word relations, so the taboo list is the nouns that look
most like the target (most shared letter pairs) - a spelling constraint rather than a semantic
one, stated here so no one mistakes it for clembench's related-word lists.
"""

from __future__ import annotations

import functools
import random
import re
import string
from collections.abc import Iterable
from typing import ClassVar

import snowballstemmer

from clembench_games.master import GameMaster, Message
from clembench_games.rule_options import rule_options
from clembench_games.words import words

MAX_ROUNDS = 3
#: Phrases a describer can introduce its pattern clue with; it takes the first one that uses no
#: taboo word (the target itself can be "pattern", "blank", ...).
_PATTERN_CODES = ("a noun that fits the pattern", "fill in the blanks", "crossword entry")
PATTERN = re.compile(r"(?:" + "|".join(_PATTERN_CODES) + r"): ([a-z_](?: [a-z_])+)")


_STEMMER = snowballstemmer.stemmer("english")
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def stem(word: str) -> str:
    return _STEMMER.stemWord(word)


def clue_words(text: str) -> list[str]:
    """The clue's words as the stem check sees them: lower case, punctuation deleted (so
    ``sun-flower`` is one word), split on white space."""
    return text.lower().translate(_NO_PUNCTUATION).split()


def spelled_runs(text: str) -> list[str]:
    """Runs of two or more single letters in ``text`` (``e l b a t``, ``T, A, B``, ``t.a_b``),
    each joined into one string: a word spelled letter by letter."""
    runs: list[list[str]] = [[]]
    for t in re.findall(r"[a-z]+", text.lower()):
        if len(t) == 1:
            runs[-1].append(t)
        elif runs[-1]:
            runs.append([])
    return ["".join(r) for r in runs if len(r) > 1]


def pattern_clue(target: str, round_no: int) -> str:
    """The scripted describers' clue: ``t _ _ _ l e``: the first letter and ``round_no`` letters at
    the end, never more than ``len - 2`` letters in all (a 4-letter word shows 2)."""
    shown = min(1 + round_no, len(target) - 2)
    return " ".join(c if i == 0 or i >= len(target) - (shown - 1) else "_" for i, c in enumerate(target))


def taboo_hits(clue: str, banned_words: list[str], spelling: bool = True, stopwords: Iterable[str] = ()) -> list[str]:
    """Words of ``clue`` (less ``stopwords``) with the stem of one of ``banned_words``; with
    ``spelling``, also words that are one written backwards and runs of single letters that spell
    one in either direction."""
    banned = {stem(w) for w in banned_words}
    skip = set(stopwords)
    checked = [w for w in clue_words(clue) if w not in skip]
    hits = [w for w in checked if stem(w) in banned or (spelling and stem(w[::-1]) in banned)]
    if spelling:
        hits += [" ".join(r) for r in spelled_runs(clue) if any(b in r or b in r[::-1] for b in banned)]
    return hits


def pattern_reply(target: str, taboo: list[str], round_no: int) -> str:
    """The scripted describers' reply: a :func:`pattern_clue` after the first phrase that is legal."""
    pattern = pattern_clue(target, round_no)
    code = next((c for c in _PATTERN_CODES if not taboo_hits(f"{c}: {pattern}", [target, *taboo])), _PATTERN_CODES[-1])
    return f"CLUE: {code}: {pattern}"


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
        self.options = rule_options(instance)
        self.guesses: list[str] = []
        self.clues: list[str] = []
        self.rounds = 0  # rounds started (describer replies)

    def opening(self) -> None:
        self.ask("describer", "Give your first clue. Reply with CLUE: <your description>")

    def taboo_hits(self, clue: str) -> list[str]:
        return taboo_hits(clue, [self.target, *self.instance["taboo"]], self.options.taboo_spelling_check,
                          self.options.taboo_stopwords)

    def main_score(self) -> float:
        return 100.0 / len(self.guesses) if self.outcome == "success" else 0.0

    def metrics(self) -> dict[str, float]:
        """Request counts per round (a clue and its guess are one request), as clembench counts them."""
        m = super().metrics()
        violated = m["Aborted"]
        m.update({"Request Count": float(self.rounds), "Parsed Request Count": self.rounds - violated,
                  "Violated Request Count": violated})
        return m

    def on_reply(self, seat: str, text: str) -> None:
        if seat == "describer":
            self.rounds += 1
            if not text.startswith("CLUE:"):
                self.abort("describer reply does not start with 'CLUE:'")
                return
            clue = text[len("CLUE:"):].strip()
            used = self.taboo_hits(clue)
            if used:  # clembench: a played loss (the describer broke the taboo), not a format error
                self.lose(f"clue uses a taboo word: {used[0]!r}")
                return
            self.clues.append(clue)
            self.ask("guesser", f"CLUE: {clue}\nReply with GUESS: <one word>")
            return
        if not text.startswith("GUESS:"):
            self.abort("guesser reply does not start with 'GUESS:'")
            return
        guess = text[len("GUESS:"):].lower().translate(_NO_PUNCTUATION).strip()
        self.guesses.append(guess)
        if guess == self.target:
            self.win(f"guessed '{guess}' in round {len(self.guesses)}")
        elif len(self.guesses) >= MAX_ROUNDS:
            self.lose(f"'{guess}' was wrong and no round is left")
        else:
            self.ask("describer", f"The guess was '{guess}', which is wrong. Give another clue.")

    # --- scripted players ---------------------------------------------------------------------
    def perfect(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        """Perfect describer gives the pattern clue; perfect guesser is an oracle (the upper bound,
        as in wordle): it knows the target whatever the clue says."""
        return pattern_reply(self.target, self.instance["taboo"], len(self.clues) + 1) if seat == "describer" else f"GUESS: {self.target}"

    def random(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        if seat == "describer":
            safe = [w for w in rng.sample(words("noun"), 20) if not self.taboo_hits(w)]
            return "CLUE: " + " ".join(safe[:3])
        return f"GUESS: {rng.choice(words('noun'))}"
