"""The options of ``clembench-games`` and the dataset rows and episodes they describe.

Rows: one per (instance, LLM seat); ``seat`` names the seat whose turns are this row's training
sample. With ``seats="self-play"`` (clembench's protocol) the policy plays every seat of the
episode (``self_play`` is true; the row's seat is the one trained from it); with
``seats="single"`` the other seats are played by a scripted partner. Rows also carry ``game``,
``experiment``, ``instance_id``, ``seed``, ``instance`` (JSON, which ``episodes(row)`` rebuilds
the game from) and ``prompt``: the seat's opening messages when it acts first, otherwise (its
opening depends on the other seats' moves) its rules as the first user message.

Apart from :mod:`clembench_games.plugin` so the ``rlplugs games`` commands
(:mod:`clembench_games.cli`) build rows and episodes without importing the registration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from rlplugs import StrictConfig, did_you_mean, repeated

from clembench_games.instances import GAMES, instances, new_game
from clembench_games.master import GameEpisode
from clembench_games.rule_options import RuleOptions


class ClembenchGamesConfig(StrictConfig):
    """Options of ``clembench-games`` (``--env_args`` / YAML ``env_args``)."""

    games: tuple[str, ...] = Field(tuple(GAMES), description="games to include (default: all)")
    seats: Literal["self-play", "single"] = Field("self-play", description="policy on every LLM seat, or on one seat per row")
    partner: Literal["perfect", "random"] = Field("perfect", description="scripted player on seats the policy does not play")
    train_per_experiment: int = Field(40, ge=1, description="train instances per experiment")
    validation_per_experiment: int = Field(4, ge=1)
    test_per_experiment: int = Field(8, ge=1)
    seed: int = Field(0, description="seed of the train instances (validation/test are fixed)")
    sft_data: str | None = Field(None, description="JSONL from `rlplugs games sft-data`: offered as SFT dataset 'won-episodes'")
    rule_options: RuleOptions = Field(default_factory=RuleOptions, description="where the games keep a rule of their own instead of clembench 2.0's")

    @field_validator("games")
    @classmethod
    def _known_games(cls, games: tuple[str, ...]) -> tuple[str, ...]:
        if games == ("all",):
            return tuple(GAMES)
        if not games:
            raise ValueError(f"no game: name at least one of {', '.join(GAMES)} (or 'all')")
        unknown = [g for g in games if g not in GAMES]
        if unknown:
            raise ValueError(f"unknown game {did_you_mean(unknown, GAMES, n=1)}; games: {', '.join(GAMES)}")
        if twice := repeated(games):  # each would be played twice over, its instances counted twice in clemscore
            raise ValueError(f"{', '.join(twice)} named more than once: name each game once")
        return games

    @field_validator("sft_data")
    @classmethod
    def _sft_data_is_a_file(cls, path: str | None) -> str | None:
        if path is not None and not Path(path).is_file():
            raise ValueError(f"{path}: no such file; write it with `rlplugs games sft-data`")
        return path


def episode_for_row(row: dict[str, Any], partner: str = "perfect") -> GameEpisode:
    """The episode a dataset row describes (also used for rows that came back through Arrow)."""
    instance = json.loads(row["instance"]) if isinstance(row["instance"], str) else row["instance"]
    game = new_game(instance)
    seats = game.seats if row.get("self_play") else (row["seat"],)
    meta = {k: row[k] for k in ("experiment", "instance_id", "seat") if k in row}
    return GameEpisode(game, tuple(seats), partner=partner, seed=int(row["seed"]), meta=meta)


def rows(cfg: ClembenchGamesConfig, split: str) -> list[dict[str, Any]]:
    size = {"train": cfg.train_per_experiment, "validation": cfg.validation_per_experiment, "test": cfg.test_per_experiment}[split]
    seed = cfg.seed if split == "train" else 0
    out = []
    for game in cfg.games:
        for inst in instances(game, split, size, seed):
            inst = {**inst, "rule_options": cfg.rule_options.model_dump()}
            for seat in GAMES[game].seats:
                row = {"game": game, "experiment": inst["experiment"], "instance_id": inst["instance_id"],
                       "seed": inst["seed"], "seat": seat, "self_play": cfg.seats == "self-play",
                       "instance": json.dumps(inst)}
                ep = episode_for_row(row, cfg.partner)
                rules = ep.game.rules[seat].format(**ep.game.instance)
                row["prompt"] = ep.observation() if ep.current_seat == seat else [{"role": "user", "content": rules}]
                out.append(row)
    return out
