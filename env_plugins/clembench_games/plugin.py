"""Registers ``clembench-games``: config -> dataset rows -> episodes -> reward components -> EnvSpec.

Rows: one per (instance, LLM seat); ``seat`` names the seat whose turns are this row's training
sample. With ``seats="self-play"`` (clembench's protocol) the policy plays every seat of the
episode (``self_play`` is true; the row's seat is the one trained from it); with
``seats="single"`` the other seats are played by a scripted partner. Rows also carry ``game``,
``experiment``, ``instance_id``, ``seed``, ``instance`` (JSON, which ``episodes(row)`` rebuilds
the game from) and ``prompt``: the seat's opening messages when it acts first, otherwise (its
opening depends on the other seats' moves) its rules as the first user message.

Rewards: ``main_score`` (Main Score / 100), ``played`` (1 - Aborted) and ``success``. An aborted
episode scores 0 on all three with the reason "aborted: ..." - a real score (the model broke
the rules), not an unscored one.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from rlplugs import hookimpl
from rlplugs.config import StrictConfig
from rlplugs.envspec import EnvSpec, EvalProtocol
from rlplugs.registry import Registration, closest
from rlplugs.rewards import RewardComponent, Sample, Score, Unscorable

from clembench_games.instances import EXPERIMENTS, GAMES, SPLITS, instances, new_game
from clembench_games.master import GameEpisode, play_scripted
from clembench_games.reference import reference_policy
from clembench_games.sft import turn_samples
from clembench_games.transcripts import save_episode

ENV_NAME = "clembench-games"


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

    @field_validator("games")
    @classmethod
    def _known_games(cls, games: tuple[str, ...]) -> tuple[str, ...]:
        if games == ("all",):
            return tuple(GAMES)
        for g in games:
            if g not in GAMES:
                hint = closest(g, GAMES)
                raise ValueError(f"unknown game '{g}'" + (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; games: {', '.join(GAMES)}")
        return games


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
            for seat in GAMES[game].seats:
                row = {"game": game, "experiment": inst["experiment"], "instance_id": inst["instance_id"],
                       "seed": inst["seed"], "seat": seat, "self_play": cfg.seats == "self-play",
                       "instance": json.dumps(inst)}
                ep = episode_for_row(row, cfg.partner)
                rules = ep.game.rules[seat].format(**ep.game.instance)
                row["prompt"] = ep.observation() if ep.current_seat == seat else [{"role": "user", "content": rules}]
                out.append(row)
    return out


def _dataset(cfg: ClembenchGamesConfig, split: str):
    from datasets import Dataset

    return Dataset.from_list(rows(cfg, split))


# --- rewards --------------------------------------------------------------------------------
def _component(name: str, sample: Sample) -> Score:
    if sample.episode is None:
        raise Unscorable("no episode attached to the sample")
    return sample.episode.scores()[name]


COMPONENTS = {
    "main_score": (1.0, "clembench Main Score / 100 (0 when aborted)"),
    "played": (0.1, "1 unless the episode was aborted for a rule or format violation"),
    "success": (0.0, "1 when the game was won (logged; weight 0 by default)"),
}


def components() -> list[RewardComponent]:
    return [RewardComponent(n, partial(_component, n), weight=w, description=d) for n, (w, d) in COMPONENTS.items()]


def preflight_samples(cfg: ClembenchGamesConfig) -> list[Sample]:
    """A perfect and a random scripted episode on the first validation instance of every game."""
    samples = []
    for game in cfg.games:
        inst = instances(game, "validation", 1)[0]
        for style in ("perfect", "random"):
            ep = play_scripted(new_game(inst), style, seed=inst["seed"])
            samples.append(Sample(prompt=ep.turns[0].messages, completion=ep.turns[-1].response,
                                  row={"game": game, "instance_id": inst["instance_id"]}, episode=ep))
    return samples


def sft_scripted_wins(cfg: ClembenchGamesConfig):
    """Turn samples from perfect scripted self-play on the train split (a format warm-up)."""
    samples = []
    for game in cfg.games:
        for inst in instances(game, "train", cfg.train_per_experiment, cfg.seed):
            samples += turn_samples(play_scripted(new_game(inst), "perfect", seed=inst["seed"]).record())
    return as_prompt_completion(samples)


def as_prompt_completion(samples: list[dict[str, Any]]):
    """Chat samples -> TRL conversational prompt/completion rows, so SFT trains only the final turn
    (the seat's earlier replies in the prompt are their own samples already)."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": s["messages"][:-1], "completion": s["messages"][-1:]} for s in samples])


def sft_won_episodes(path: str):
    """The won-episode turn samples written by ``rlplugs games sft-data``."""
    lines = Path(path).read_text().splitlines()
    if not lines:
        raise ValueError(f"{path} holds no SFT samples (no episode was won in the collected runs)")
    return as_prompt_completion([json.loads(line) for line in lines])


def render(sample: Sample, out_dir: Any) -> list[Path]:
    rec = sample.episode.record()
    return [save_episode(Path(out_dir), rec, sample.group or 0).with_suffix(".html")]


def _eval_rows(cfg: ClembenchGamesConfig) -> int:
    """Rows of the larger evaluation split: the protocol plays all of them (clembench plays every instance)."""
    per = max(cfg.validation_per_experiment, cfg.test_per_experiment)
    return sum(len(EXPERIMENTS[g]) * per * len(GAMES[g].seats) for g in cfg.games)


def build(cfg: ClembenchGamesConfig | None = None) -> EnvSpec:
    cfg = cfg or ClembenchGamesConfig()
    return EnvSpec(
        name=ENV_NAME,
        description="Clean-room clembench-2.0-style dialogue games (wordle x3, taboo, referencegame, "
        "privateshared) with clembench scores; self-play or one seat against a scripted partner.",
        datasets={s: partial(_dataset, cfg, s) for s in SPLITS},
        components=components(),
        preflight_samples=partial(preflight_samples, cfg),
        episodes=partial(episode_for_row, partner=cfg.partner),
        eval=EvalProtocol(
            splits=("validation", "test"), rows=_eval_rows(cfg), samples_per_row=1, temperature=0.0,
            enable_thinking=False, max_new_tokens=300, report_by=("game",), success_component="success",
        ),
        sft_datasets={
            **({"won-episodes": partial(sft_won_episodes, cfg.sft_data)} if cfg.sft_data else {}),
            "scripted-wins": partial(sft_scripted_wins, cfg),
        },
        reference_policy=reference_policy,
        render=render,
    )


@hookimpl
def rlplugs_register_environments() -> list[Registration]:
    return [Registration(ENV_NAME, build, "clembench-style dialogue games, clemscore, won-episode SFT", ClembenchGamesConfig)]


@hookimpl
def rlplugs_add_cli_commands(subparsers) -> None:
    from clembench_games.cli import add_games_command

    add_games_command(subparsers)
