"""The games, their experiments, and seeded instance sets per split.

Nothing is stored: every instance is regenerated from ``(game, split, experiment, seed)`` with
Python's string-seeded ``random.Random`` (stable across platforms), so the validation and test
sets are fixed by their seeds. Target words are drawn only from the word-list share of their
split (:func:`clembench_games.words.split_of`), so test words are never train words.

Experiments mirror clembench's idea of sub-conditions per game: word class for the Wordles, word
length for Taboo, grid family for the reference game, scenario for private/shared.
"""

from __future__ import annotations

import random

from clembench_games import referencegame
from clembench_games.master import GameMaster
from clembench_games.privateshared import SCENARIOS, PrivateShared, make_slots
from clembench_games.referencegame import ReferenceGame
from clembench_games.taboo import Taboo, look_alikes
from clembench_games.wordle import Wordle, WordleWithClue, WordleWithCritic, make_clue
from clembench_games.words import five_letter_dictionary, targets

GAMES: dict[str, type[GameMaster]] = {
    g.name: g for g in (Wordle, WordleWithClue, WordleWithCritic, Taboo, ReferenceGame, PrivateShared)
}
SPLITS = ("train", "validation", "test")
#: Instances per experiment of each split unless the config says otherwise.
DEFAULT_SIZES = {"train": 40, "validation": 4, "test": 8}

_WORDLE_EXPERIMENTS = {"nouns": ("noun",), "adjectives_verbs": ("adjective", "verb")}
_TABOO_EXPERIMENTS = {"short_words": range(4, 6), "medium_words": range(6, 8), "long_words": range(8, 13)}
EXPERIMENTS: dict[str, tuple[str, ...]] = {
    "wordle": tuple(_WORDLE_EXPERIMENTS),
    "wordle_withclue": tuple(_WORDLE_EXPERIMENTS),
    "wordle_withcritic": tuple(_WORDLE_EXPERIMENTS),
    "taboo": tuple(_TABOO_EXPERIMENTS),
    "referencegame": referencegame.EXPERIMENTS,
    "privateshared": tuple(SCENARIOS),
}


def _wordle_targets(experiment: str, split: str) -> list[tuple[str, str]]:
    kinds = _WORDLE_EXPERIMENTS[experiment]
    return sorted({(w, k) for k in kinds for w in targets(k, split, 5) if w in five_letter_dictionary()})


def _generate(game: str, experiment: str, split: str, n: int, rng: random.Random) -> list[dict]:
    """``n`` instance payloads (game fields only) for one experiment."""
    if game.startswith("wordle"):
        pool = _wordle_targets(experiment, split)
        picks = rng.sample(pool, min(n, len(pool)))
        if game == "wordle":
            return [{"target": w} for w, _ in picks]
        return [{"target": w, **make_clue(w, k, rng)} for w, k in picks]
    if game == "taboo":
        pool = targets("noun", split, _TABOO_EXPERIMENTS[experiment])
        return [{"target": w, "taboo": look_alikes(w)} for w in rng.sample(pool, min(n, len(pool)))]
    if game == "referencegame":
        out = []
        for _ in range(n):
            order = [0, 1, 2]
            rng.shuffle(order)
            grids = referencegame.make_grids(experiment, rng)
            out.append({"grids": [list(g) for g in grids], "target_index": rng.randrange(3), "follower_order": order})
        return out
    if game == "privateshared":
        return [{"scenario": experiment, "slots": make_slots(experiment, rng)} for _ in range(n)]
    raise KeyError(f"unknown game '{game}'; games: {', '.join(GAMES)}")


def instances(game: str, split: str, per_experiment: int | None = None, seed: int = 0) -> list[dict]:
    """The instance set of ``game`` for ``split``: ids, experiment, seed and the game's fields."""
    if game not in GAMES:
        raise KeyError(f"unknown game '{game}'; games: {', '.join(GAMES)}")
    if split not in SPLITS:
        raise KeyError(f"unknown split '{split}'; splits: {', '.join(SPLITS)}")
    n = DEFAULT_SIZES[split] if per_experiment is None else per_experiment
    rows = []
    for experiment in EXPERIMENTS[game]:
        rng = random.Random(f"{game}/{split}/{experiment}/{seed}")
        for i, payload in enumerate(_generate(game, experiment, split, n, rng)):
            rows.append(
                {
                    "game": game,
                    "experiment": experiment,
                    "instance_id": f"{split}-{experiment}-{i}",
                    "seed": rng.randrange(2**31),
                    **payload,
                }
            )
    return rows


def new_game(instance: dict) -> GameMaster:
    return GAMES[instance["game"]](instance)


