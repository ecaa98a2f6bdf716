"""A reference player that sees only the conversation: ``EnvSpec.reference_policy``.

The scripted ``perfect`` players of the games read game state (the wordle guesser is an oracle),
which makes them sanity bounds but not a :class:`~rlplugs.episode.Policy`. This player works from
the messages alone, the way a model must: it recognises its game and seat from the rules text
and then

- wordle guesser: guesses the first dictionary word consistent with the clue and every feedback
  line so far (a constraint solver; it usually, not always, wins within six guesses);
- wordle critic: agrees exactly when the proposed guess fits the clue (the critic is not shown the
  letter feedback);
- taboo: the describer gives a crossword pattern (first letter, one more end letter a round), the
  guesser names the first noun of the word list that fits it and was not guessed yet;
- reference game: the giver lists the target's X cells, the follower picks the best-fitting grid;
- private/shared: answers from its private list; says a slot is known once it was asked.

It is the policy behind ``rlplugs eval --env clembench-games --policy reference`` and the
scripted agent of the verifiers and TRL adapter tests.
"""

from __future__ import annotations

import re

from clembench_games.master import Message
from clembench_games.referencegame import FILLED, ORDINALS, SIZE, cells_of
from clembench_games.taboo import PATTERN, pattern_reply
from clembench_games.wordle import _ORDINALS as LETTER_ORDINALS
from clembench_games.wordle import feedback
from clembench_games.words import five_letter_dictionary, words

_FEEDBACK = re.compile(r"Feedback: ((?:[a-z] (?:green|yellow|red)(?:, )?){5})")
_CLUE = re.compile(r"the word is an? (noun|adjective|verb) whose (\w+) letter is '([a-z])'")
_PROPOSAL = re.compile(r"Proposed guess: ([a-z]+)")
_GRID = re.compile(rf"(first|second|third) grid:\n((?:.+\n?){{{SIZE}}})")


def _texts(messages: list[Message], role: str) -> list[str]:
    return [m["content"] for m in messages if m["role"] == role]


def _wordle_candidates(chat: str) -> list[str]:
    pool = sorted(five_letter_dictionary())
    if clue := _CLUE.search(chat):
        kind, nth, letter = clue.groups()
        pos = LETTER_ORDINALS.index(nth)
        of_kind = set(words(kind))
        pool = [w for w in pool if w in of_kind and w[pos] == letter]
    for match in _FEEDBACK.finditer(chat):
        pairs = [p.split() for p in match.group(1).split(", ")]
        guess, colours = "".join(p[0] for p in pairs), [p[1] for p in pairs]
        pool = [w for w in pool if feedback(guess, w) == colours]
    return pool


def _grids(text: str) -> dict[str, tuple[str, ...]]:
    return {name: tuple(line.replace(" ", "") for line in body.strip().splitlines()) for name, body in _GRID.findall(text)}


def reference_policy(messages: list[Message]) -> str:
    """The next reply of whichever seat owns ``messages``."""
    first, last = messages[0]["content"], messages[-1]["content"]
    chat = "\n".join(_texts(messages, "user"))
    if first.startswith("Let's play Wordle"):
        if "final guess" in last and (proposed := _texts(messages, "assistant")):
            return proposed[-1]  # the critic has spoken; keep the proposal
        pool = _wordle_candidates(chat)
        return f"explanation: it fits the clue and all feedback.\nguess: {pool[0] if pool else 'house'}"
    if "you are the critic" in first:
        proposal = _PROPOSAL.findall(last)[-1]
        ok = proposal in _wordle_candidates(chat)
        return f"explanation: it {'fits' if ok else 'does not fit'} the clue.\nagreement: {'yes' if ok else 'no'}"
    if first.startswith("We play Taboo. You describe"):
        target = re.search(r"Your word: ([a-z]+)\.", first).group(1)
        taboo = re.search(r"nor any form of them: (.*)\.\n", first).group(1).split(", ")
        return pattern_reply(target, taboo, len(_texts(messages, "assistant")) + 1)
    if first.startswith("We play Taboo."):
        guessed = {g.split(":", 1)[1].strip() for g in _texts(messages, "assistant")}
        shape = PATTERN.search(last)
        fits = [w for w in words("noun") if shape and _fits(w, shape.group(1).split()) and w not in guessed]
        return f"GUESS: {fits[0] if fits else 'thing'}"
    if first.startswith("We play a reference game. You see three grids; another player sees"):
        target = _grids(first)[re.search(r"The target is the (\w+) grid", first).group(1)]
        cells = ", ".join(f"({r + 1},{c + 1})" for r, c in sorted(cells_of(target)))
        return f"EXPRESSION: the grid with {FILLED} exactly at {cells}"
    if first.startswith("We play a reference game."):
        said = {(int(r) - 1, int(c) - 1) for r, c in re.findall(r"\((\d),\s*(\d)\)", last)}
        grids = _grids(last)

        def fit(name: str) -> float:
            mine = cells_of(grids[name])
            return len(mine & said) / max(1, len(mine | said))

        return f"ANSWER: {max(ORDINALS, key=fit)}"
    if first.startswith("You are talking to an assistant"):
        private = dict(re.findall(r"^- (\w+): (.+)$", first, re.M))
        if probe := re.search(r"already know your (\w+)\?", last):
            asked = [m for m in _texts(messages, "user")[:-1] if m.startswith("QUESTION:") or "\n\nQUESTION:" in m]
            slot = probe.group(1)
            return f"ASIDE: {'yes' if any(_asks_for(q, slot) for q in asked) else 'no'}"
        slot = next((s for s in private if _asks_for(last, s)), next(iter(private)))
        return f"ANSWER: {private[slot]}"
    raise ValueError("reference_policy: not a clembench-games conversation")


def _fits(word: str, pattern: list[str]) -> bool:
    return len(word) == len(pattern) and all(p in ("_", c) for p, c in zip(pattern, word, strict=True))


def _asks_for(question: str, slot: str) -> bool:
    from clembench_games.privateshared import SCENARIOS

    return any(q in question for scenario in SCENARIOS.values() for s, (q, _) in scenario.items() if s == slot)
