"""Registers ``clembench-games``: config -> dataset rows -> episodes -> reward components -> EnvSpec.

Rows and episodes: :mod:`clembench_games.rows`.

Rewards: ``main_score`` (Main Score / 100), ``played`` (1 - Aborted) and ``success``. An aborted
episode scores 0 on all three with the reason "aborted: ..." - a real score (the model broke
the rules), not an unscored one.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from rlplugs import (
    EnvSpec,
    EvalProtocol,
    Registration,
    RewardComponent,
    Sample,
    Score,
    Unscorable,
    hookimpl,
)

from clembench_games.instances import EXPERIMENTS, GAMES, SPLITS, instances, new_game
from clembench_games.master import play_scripted
from clembench_games.reference import reference_policy
from clembench_games.rows import ClembenchGamesConfig, episode_for_row, rows
from clembench_games.sft import turn_samples
from clembench_games.transcripts import save_episode

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
    return [Registration("clembench-games", build, "clembench-style dialogue games, clemscore, won-episode SFT", ClembenchGamesConfig)]


@hookimpl
def rlplugs_add_cli_commands(subparsers) -> None:
    from clembench_games.cli import add_games_command

    add_games_command(subparsers)
