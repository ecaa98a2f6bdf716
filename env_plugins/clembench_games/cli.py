"""``rlplugs games ...``: collect rollouts, turn won episodes into SFT data, print clemscore tables.

- ``collect --model PATH --games all --episodes N --out DIR``: the model plays N episodes of each
  game (self-play by default, clembench's protocol), all episodes advancing in lock-step so each
  step is one batched ``generate``; every episode is saved as JSON + HTML, with ``index.html``
  and ``scores.json`` for the run.
- ``sft-data --runs DIR --out FILE``: the won episodes' turns as chat samples (JSONL).
- ``score --runs DIR``: the clemscore table of one or more runs.
- ``clem --checkout DIR --model PATH [PATH] --games ... [--instances F] [--experiments E ...] [--limit N]``:
  a user's own clembench games through clemcore, self-play or cross-play (``clem_adapter``; needs
  the ``clem`` extra in its own environment).
"""

from __future__ import annotations

import argparse
import json
import math
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlplugs import BatchPolicy, UsageError

from clembench_games.instances import GAMES
from clembench_games.rows import ClembenchGamesConfig, episode_for_row, rows
from clembench_games.scoring import clem_table
from clembench_games.sft import won_turn_samples
from clembench_games.transcripts import load_records, save_episode, write_index


def _pick(game_rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` rows alternating over experiments (cycling when there are fewer rows than ``n``)."""
    order = sorted(game_rows, key=lambda r: (int(r["instance_id"].rsplit("-", 1)[1]), r["experiment"], r["seat"]))
    return list(islice(cycle(order), n))


def collect(policy: BatchPolicy, games: list[str], episodes: int, out: Path, split: str = "validation",
            seats: str = "self-play", seat: str | None = None, progress=None) -> list[Path]:
    """Play ``episodes`` episodes of each game with ``policy`` and save them under ``out``.
    ``seat`` keeps only rows of that seat (with ``seats="single"``: the model plays only it)."""
    cfg = ClembenchGamesConfig(games=tuple(games), seats=seats)
    # a self-play episode is the same whichever seat's row starts it: play each instance once
    first_seat = {g: GAMES[g].seats[0] for g in cfg.games}
    candidates = [r for r in rows(cfg, split)
                  if (r["seat"] == seat if seat else not r["self_play"] or r["seat"] == first_seat[r["game"]])]
    picked = [r for g in cfg.games for r in _pick([r for r in candidates if r["game"] == g], episodes)]
    running = [episode_for_row(r) for r in picked]
    for ep in running:
        ep.meta["split"] = split
    saved: list[Path] = []
    live = list(range(len(running)))
    while live:
        replies = policy.generate([running[i].observation() for i in live], n=1)
        for i, (reply,) in zip(live, replies, strict=True):
            running[i].step(reply)
            if running[i].done:
                saved.append(save_episode(out, running[i].record(), i))
                if progress:
                    progress()
        live = [i for i in live if not running[i].done]
    write_index(out)
    return saved


def _cmd_collect(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from rlplugs import check_counts, check_model_dir, load_policy, one_line, writable_dir

    try:
        games = list(ClembenchGamesConfig(games=tuple(args.games)).games)
    except ValidationError as exc:
        raise UsageError(f"--{one_line(exc)}") from None  # the field is games: "--games: unknown game ..."
    check_counts(args, episodes=1)
    if args.seat:
        seats = sorted({s for g in games for s in GAMES[g].seats})
        if args.seat not in seats:
            raise UsageError(f"--seat {args.seat}: none of {', '.join(games)} has that seat; seats: {', '.join(seats)}")
    check_model_dir(args.model, "--model")
    out = writable_dir(args.out, "--out")
    policy = load_policy(args.model, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                         batch_size=args.batch_size, seed=args.seed)
    with Progress() as bar:
        task = bar.add_task("episodes", total=len(games) * args.episodes)
        collect(policy, games, args.episodes, out, split=args.split, seats=args.seats, seat=args.seat,
                progress=lambda: bar.advance(task))
    _print_table(clem_table(load_records(out)))
    return 0


def _check_runs(runs: list[str]) -> None:
    missing = [r for r in runs if not Path(r).is_dir()]
    if missing:
        raise UsageError(f"no run directory {', '.join(missing)}")


def _run_records(runs: list[str]) -> list[dict[str, Any]]:
    """Every run folder's episode records. A folder without any is refused: its clemscore would
    print as n/a and its SFT file would be empty, as if games had been played and none finished."""
    records = []
    for run in runs:
        found = list(load_records(Path(run)))
        if not found:
            raise UsageError(f"{run}: no episode records in it; give the folder `rlplugs games collect --out` wrote")
        records += found
    return records


def _cmd_sft_data(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rlplugs import writable_file

    _check_runs(args.runs)
    out = writable_file(args.out, "--out")
    records = _run_records(args.runs)
    samples = won_turn_samples(records)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for s in samples:
            fh.write(json.dumps(s, ensure_ascii=False) + "\n")
    won = sum(r["metrics"].get("Success") == 1.0 for r in records)
    Console().print(f"{len(samples)} turn samples from {won} won of {len(records)} episodes -> {out}")
    return 0


def _cmd_score(args: argparse.Namespace) -> int:
    _check_runs(args.runs)
    table = clem_table(_run_records(args.runs))
    if args.json:
        print(json.dumps(table, indent=1))  # noqa: T201 - CLI output
    else:
        _print_table(table)
    return 0


def _cmd_clem(args: argparse.Namespace) -> int:
    """Play a clembench checkout's games through clemcore (needs the ``clem`` extra, own venv)."""
    from rich.console import Console

    try:
        from clembench_games.clem_adapter import plan_run, run_games
    except ModuleNotFoundError as exc:
        Console(stderr=True, soft_wrap=True).print(f"error: {exc}. Install the clem extra in its own venv: pip install 'rlplugs[clem]'", markup=False)
        return 2
    from rlplugs import load_policy

    paths = list(dict.fromkeys(args.model))  # `--model a a` is self-play, as one model
    selection = dict(experiments=args.experiments, instances=args.instances, limit=args.limit)
    plan_run(Path(args.checkout), args.games, Path(args.out), models=len(paths), **selection)  # before loading models
    names = [Path(p).name for p in paths]
    names = names if len(set(names)) == len(names) else paths  # two checkpoints of one name: their paths tell them apart
    policies = {name: load_policy(path, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                                  batch_size=1, seed=args.seed) for name, path in zip(names, paths, strict=True)}
    run = run_games(Path(args.checkout), args.games, policies, Path(args.out), **selection)
    err = Console(stderr=True)
    for game, game_id, why in run.failures:  # clemcore logs only to clembench.log
        err.print(f"warning: {game} instance {game_id} failed and was skipped: {why}", markup=False)
    _print_table(clem_table(run.records))
    return 0


def _print_table(table: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    def fmt(x: float) -> str:
        return "n/a" if x is None or math.isnan(x) else f"{x:.2f}"

    t = Table("game", "episodes", "% played", "quality", "% success", title="clembench-games")
    for game, v in table["games"].items():
        t.add_row(game, str(v["episodes"]), fmt(v["% Played"]), fmt(v["Quality"]), fmt(v["Success"]))
    t.add_row("[b]average[/b]", "", fmt(table["% Played"]), fmt(table["Quality"]), "")
    console = Console()
    console.print(t)
    console.print(f"clemscore = {fmt(table['clemscore'])}")


def add_games_command(subparsers) -> None:
    games = subparsers.add_parser("games", help="clembench-games: collect rollouts, SFT data, clemscore")
    sub = games.add_subparsers(dest="games_command", required=True)

    c = sub.add_parser("collect", help="play episodes with a model and save transcripts")
    c.add_argument("--model", required=True, help="local model directory (from_pretrained)")
    c.add_argument("--games", nargs="+", default=["all"], help=f"'all' or some of: {', '.join(GAMES)}")
    c.add_argument("--episodes", type=int, default=8, help="episodes per game")
    c.add_argument("--out", required=True, help="run directory for transcripts")
    c.add_argument("--split", default="validation", choices=("train", "validation", "test"))
    c.add_argument("--seats", default="self-play", choices=("self-play", "single"))
    c.add_argument("--seat", help="with --seats single: only rows where the model plays this seat")
    c.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (clembench protocol)")
    c.add_argument("--max-new-tokens", type=int, default=300)
    c.add_argument("--batch-size", type=int, default=8)
    c.add_argument("--seed", type=int, default=0)
    c.set_defaults(func=_cmd_collect)

    s = sub.add_parser("sft-data", help="turn-level chat samples from won episodes (JSONL)")
    s.add_argument("--runs", nargs="+", required=True, help="run directories written by 'games collect'")
    s.add_argument("--out", required=True, help="output JSONL file")
    s.set_defaults(func=_cmd_sft_data)

    m = sub.add_parser("clem", help="play a clembench checkout's games through clemcore (extra 'clem', own venv)")
    m.add_argument("--checkout", required=True, help="clembench checkout (directory holding <game>/clemgame.json)")
    m.add_argument("--model", nargs="+", required=True,
                   help="local model directory (from_pretrained): one plays every seat (self-play); one per player, "
                        "in the game's player order, is cross-play (as clem run -m A B)")
    m.add_argument("--games", nargs="+", required=True, help="game names in the checkout, e.g. taboo wordle")
    m.add_argument("--out", required=True, help="run directory: rlplugs records + clem-results/ tree")
    m.add_argument("--instances", help="instances file in each game's in/ folder, e.g. instances_v1.6 "
                                       "(default: the one clemgame.json names, else instances.json)")
    m.add_argument("--experiments", nargs="+", help="experiment names to play (default: all in the instances file)")
    m.add_argument("--limit", type=int, help="the first N instances of each experiment (default: all)")
    m.add_argument("--temperature", type=float, default=0.0)
    m.add_argument("--max-new-tokens", type=int, default=300)
    m.add_argument("--seed", type=int, default=0)
    m.set_defaults(func=_cmd_clem)

    k = sub.add_parser("score", help="clemscore table of runs")
    k.add_argument("--runs", nargs="+", required=True,
                   help="run directories written by 'games collect' or 'rlplugs eval --env clembench-games'")
    k.add_argument("--json", action="store_true", help="print the table as JSON")
    k.set_defaults(func=_cmd_score)
