"""clembench's aggregate scores over episode records.

Per game: % Played = 100 x mean(Played) over all episodes; Quality = mean(Main Score) over the
episodes that were not aborted (undefined when every episode aborted). Over games: the average
% Played over all games, the average Quality over the games that have one, and
**clemscore = (average % Played / 100) x average Quality** - a product of means, as in clembench;
undefined (NaN, shown blank / "n/a") when no episode was played, as clembench's ``clem eval`` has it.
These are clembench-*style* figures for these clean-room games, not leaderboard clemscores.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def clem_table(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``{"games": {game: {"episodes", "% Played", "Quality", "Success"}}, "% Played", "Quality",
    "clemscore"}`` from episode records (``GameEpisode.record()`` or their JSON files)."""
    by_game: dict[str, list[dict[str, float]]] = defaultdict(list)
    for rec in records:
        by_game[rec["game"]].append(rec["metrics"])
    games = {}
    for game, metrics in sorted(by_game.items()):
        quality = [m["Main Score"] for m in metrics if not m["Aborted"] and m["Main Score"] is not None]
        games[game] = {
            "episodes": len(metrics),
            "% Played": 100.0 * _mean([m["Played"] for m in metrics]),
            "Quality": _mean(quality),
            # referencegame leaves Success undefined (None) for an aborted episode, as clembench does
            "Success": 100.0 * _mean([m["Success"] for m in metrics if m["Success"] is not None]),
        }
    played = _mean([g["% Played"] for g in games.values()])
    quality = _mean([g["Quality"] for g in games.values() if not math.isnan(g["Quality"])])
    clemscore = (played / 100.0) * quality  # NaN when no game has a quality (nothing played), as in clem eval
    return {"games": games, "% Played": played, "Quality": quality, "clemscore": clemscore}
