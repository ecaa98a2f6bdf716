"""Play the games of a user's own clembench checkout through clemcore, with an rlplugs policy as
the clemcore model, scored by each game's own scorer.

Why a separate route: rlplugs may not copy clembench's games, and clemcore 3.7 (anthropic<1)
cannot share an environment with verifiers 0.4.0 (anthropic>=1). So this module is only imported
where the ``clem`` extra is installed (its own venv, see the README), never by the plugin.

How it plays (clemcore's own game masters, not ours):

- :class:`PolicyModel` is a clemcore ``Model`` whose ``generate_response(messages)`` asks the
  policy with the player's whole perspective (``Player.__call__`` keeps memory, merges the initial
  prompt and forgets extras, exactly as in ``clem run``);
- :func:`play_instance` loads nothing itself: it drives ``create_game_master`` / ``setup`` /
  ``before_game`` / ``get_context_for`` / ``step`` of the game's ``GameBenchmark``; one policy on all
  roles is clembench's self-play. Each player gets its own :class:`SeatModel` (a view on its
  policy) so every call is logged under the seat that made it, also the calls a game master makes
  by itself in ``before_game`` or ``step`` (e.g. privateshared's probe rounds);
- the episode is scored with ``create_game_scorer(...).compute_scores(interactions)`` from a
  ``GameInteractionsRecorder``; legacy games never set the clemcore outcome, so the game's scorer
  is the only source of Main Score / Aborted / Success / Lose;
- clemcore's file-saver callbacks write the results tree ``clem run`` writes
  (``<out>/clem-results/<run>/run.json`` and ``<game>/<experiment>/episode_N/`` with
  ``instance.json``, ``interactions.json``, ``player_N.requests.json`` and ``completed.json`` or
  ``error.json``) for ``clem transcribe`` / ``clem score`` / ``clem eval``; episodes are numbered
  (clemcore's episode layout) rather than named by instance, and each
  episode is also saved as an rlplugs record (JSON + HTML), so ``rlplugs games score`` and
  ``rlplugs games sft-data`` work on these runs unchanged.

What a user picks: the instances file (``instances``, a name in each game's ``in/`` folder, as
``clem run -i``), experiments by name, and ``limit`` instances of each experiment. ``policy`` is
one policy on every seat (self-play) or ``{model name: policy}`` with one entry per player in the
game's player order (cross-play, as ``clem run -m a b``); each record says which model played
which seat.

What a user sees: clemcore sends its log to ``clembench.log`` in the working directory, so a failed
instance is also returned (:class:`ClemRun` ``.failures``) for the CLI to print; a run in which
every instance failed is a :class:`UsageError`, and so are, before anything is loaded or played,
an ``out`` that already holds a run (a second run would overwrite its episodes), an unknown game,
instances file or experiment, and a number of models that fits no game's players.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clemcore.backends.model_registry import Model, ModelSpec
from clemcore.clemgame import GameBenchmark, GameInstances, GameInteractionsRecorder, GameSpec
from clemcore.clemgame.callbacks.base import GameBenchmarkCallbackList
from clemcore.clemgame.callbacks.files import (EpisodeResultsFolder, EpisodeResultsFolderCallback, ExperimentFileSaver,
                                               InstanceFileSaver, InteractionsFileSaver, PlayerFileSaver, RunFileSaver)

try:  # clemcore 3.7: clem run marks each episode completed.json / error.json (on_game_end gets the exception)
    from clemcore.clemgame.callbacks.files import SignalFileSaver
except ImportError:  # clemcore 3.6 (run from a separate venv, see the README): neither
    SignalFileSaver = None

from rlplugs import Policy, UsageError, did_you_mean

from clembench_games.transcripts import CLEM_RESULTS, save_episode, write_index

log = logging.getLogger(__name__)

CLEM_METRICS = ("Aborted", "Lose", "Success", "Main Score", "Request Count", "Parsed Request Count", "Violated Request Count")


class PolicyModel(Model):
    """An rlplugs policy seen as a clemcore model (its name and generation settings); the players
    reach it through their :class:`SeatModel`, which logs each call in its episode."""

    def __init__(self, policy: Policy, name: str = "rlplugs-policy", temperature: float = 0.0, max_tokens: int = 300):
        super().__init__(ModelSpec(model_name=name, backend="rlplugs"))
        self.set_gen_args(temperature=temperature, max_tokens=max_tokens)
        self.policy = policy

    def ask(self, messages: list[dict], seat: str) -> dict[str, Any]:
        """The policy's reply to ``messages`` as one logged call of ``seat`` (an episode's turn)."""
        chat = [{"role": m["role"], "content": m["content"]} for m in messages]
        text = self.policy(copy.deepcopy(chat))
        return {"seat": seat, "model": self.name, "messages": chat, "response": text, "verdict": "ok"}

    def generate_response(self, messages: list[dict]) -> tuple[Any, Any, str]:
        return _response(self.ask(messages, "unknown"))  # a call from outside an episode: nothing logs it


class SeatModel(Model):
    """One player's handle on a :class:`PolicyModel`: same name and generation settings, every
    call logged under ``seat`` (known once the game master has set its players up) in the
    episode's ``calls`` (in cross-play the seats' calls interleave across models)."""

    def __init__(self, shared: PolicyModel, calls: list[dict[str, Any]]):
        super().__init__(shared.model_spec)
        self.set_gen_args(temperature=shared.temperature, max_tokens=shared.max_tokens)
        self.shared = shared
        self.calls = calls
        self.seat = "unknown"

    def generate_response(self, messages: list[dict]) -> tuple[Any, Any, str]:
        call = self.shared.ask(messages, self.seat)
        self.calls.append(call)
        return _response(call)


def _response(call: dict[str, Any]) -> tuple[Any, Any, str]:
    """A logged call as clemcore's ``generate_response`` returns it: (prompt, response object, text)."""
    return call["messages"], {"response": call["response"], "backend": "rlplugs"}, call["response"]


@dataclass
class ClemRun:
    """What :func:`run_games` played: the episode records and the instances that failed
    (``(game, game_id, "ExceptionType: message")``; tracebacks are in clembench.log)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[str, Any, str]] = field(default_factory=list)


def game_specs(checkout: Path) -> dict[str, GameSpec]:
    """Every game declared in ``<checkout>/*/clemgame.json`` by name; one file can declare several
    (clembench's ``wordle/clemgame.json`` declares wordle, wordle_withclue and wordle_withcritic)."""
    specs: dict[str, GameSpec] = {}
    for path in sorted(Path(checkout).glob("*/clemgame.json")):
        for spec in GameSpec.from_directory(str(path.parent)):
            specs.setdefault(spec.game_name, spec)
    return specs


def load_game(spec: GameSpec) -> GameBenchmark:
    """The ``GameBenchmark`` of a game spec (its ``master.py`` imported)."""
    try:
        return GameBenchmark.load_from_spec(spec)
    except Exception as exc:  # noqa: BLE001 - the game's own code: a missing package or data (NLTK's stopwords for taboo)
        why = next((line.strip(" *") for line in str(exc).splitlines() if line.strip(" *")), "")
        raise UsageError(f"game '{spec.game_name}' did not load from {spec.game_path}: {type(exc).__name__}: {why}; "
                         "install what the checkout's requirements.txt and the game's README ask for") from exc


def play_instance(bench: GameBenchmark, row: dict, models: list[PolicyModel] | PolicyModel,
                  callbacks: GameBenchmarkCallbackList | None = None) -> dict[str, Any]:
    """Play one instance row (``GameInstances`` row), self-play with one model or one model per
    player (in the game's player order); returns an rlplugs record."""
    experiment, instance = row["experiment"], row["game_instance"]
    models = [models] if isinstance(models, PolicyModel) else models
    callbacks = callbacks if callbacks is not None else GameBenchmarkCallbackList()
    calls: list[dict[str, Any]] = []
    seat_models = [SeatModel(models[i % len(models)], calls) for i in range(bench.game_spec.players)]
    gm = bench.create_game_master(experiment, seat_models)
    gm.setup(**instance)
    seats = seat_names(gm.get_players())
    for player in gm.get_players():
        if isinstance(player.model, SeatModel):
            player.model.seat = seats[player.name]
    recorder = GameInteractionsRecorder(bench.game_name, experiment["name"], instance["game_id"], "",
                                        Model.to_infos(seat_models))
    for player in gm.get_players():
        recorder.log_player(player.name, player.game_role, player.model.name)
    gm.register(recorder)
    callbacks.on_game_start(gm, instance)
    try:
        gm.before_game()  # may ask the players already (privateshared's first probe round)
        done = False
        while not done:
            player = gm.current_player
            done, _ = gm.step(player(gm.get_context_for(player)))
    except Exception as exc:  # as clemcore 3.7's own runner: error.json for this episode, then the caller decides
        if SignalFileSaver is not None:
            callbacks.on_game_end(gm, instance, exc)
        raise
    callbacks.on_game_end(gm, instance)
    scorer = bench.create_game_scorer(experiment, instance)
    scorer.compute_scores(recorder.interactions)
    scores = scorer.scores["episode scores"]
    players = {seats[p.name]: p.model.name for p in gm.get_players()}
    return _record(bench.game_name, experiment, instance, scores, calls, players, cross_play=len(models) > 1)


def seat_names(players: list) -> dict[str, str]:
    """Player name -> seat: the game role, or "role (Player N)" where two players share a role."""
    roles = [p.game_role for p in players]
    return {p.name: p.game_role if roles.count(p.game_role) == 1 else f"{p.game_role} ({p.name})" for p in players}


def _record(game: str, experiment: dict, instance: dict, scores: dict, calls: list[dict], players: dict[str, str],
            cross_play: bool) -> dict[str, Any]:
    metrics = {k: float(scores[k]) for k in CLEM_METRICS if k in scores and scores[k] is not None}
    main = metrics.get("Main Score", math.nan)
    aborted = bool(metrics.get("Aborted", 0.0))
    metrics["Main Score"] = None if aborted or main != main else main
    metrics["Played"] = 0.0 if aborted else 1.0
    outcome = "aborted" if aborted else ("success" if metrics.get("Success") else "failure")
    return {
        "game": game,
        "instance": {"experiment": experiment["name"], "instance_id": f"{experiment['name']}-{instance['game_id']}",
                     "game_id": instance["game_id"]},
        "seats": sorted(players),
        "trained_seats": sorted(players),
        "players": players,  # seat -> the model that played it (clemcore's name for a programmatic player)
        "partner": "cross-play" if cross_play else "self-play",
        "outcome": outcome,
        "abort_reason": "aborted (see the game's interactions.json)" if aborted else None,
        "metrics": metrics,
        "events": [],
        "turns": calls,
        "source": "clemcore",
    }


@dataclass
class GamePlan:
    """One game of a run: its spec (as the checkout declares it), the instances file the rows come
    from (its name in the game's ``in/`` folder) and the instance rows to play."""

    spec: GameSpec
    instances: str
    rows: list[dict[str, Any]]


def plan_run(checkout: Path, games: list[str], out: Path, *, experiments: list[str] | None = None,
             instances: str | None = None, limit: int | None = None, models: int = 1) -> dict[str, GamePlan]:
    """What a run will play, checked before any game code or model is loaded: refuses an ``out``
    that already holds files (a second run would overwrite the first one's episodes), a game the
    checkout does not declare, an instances file a game does not have, an experiment no game has
    (or a game with none of them), and a number of models that is neither 1 nor the game's
    players. ``limit`` caps the instances of each experiment."""
    out = Path(out)
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be 1 or more (instances of each experiment), not {limit}")
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty (an earlier run?): a new run would overwrite its episodes; pass a new --out")
    specs = game_specs(checkout)
    unknown = [g for g in games if g not in specs]
    if unknown:
        known = ", ".join(sorted(specs)) or "none: is it a clembench checkout?"
        raise UsageError(f"no game {did_you_mean(unknown, specs)} in {checkout} (games there: {known})")
    plans = {}
    for game in games:
        # as clem run -i: one file name for every game, else the game's own (in/instances.json by default)
        name = instances.removesuffix(".json") if instances else getattr(specs[game], "instances", "instances")
        plans[game] = GamePlan(specs[game], name, _instance_rows(specs[game], name))
    for game, plan in plans.items():
        players = plan.spec.players
        if models not in (1, players):
            either = f" (it plays every seat) or {players} (one per player, in order)" if players > 1 else ""
            raise UsageError(f"game '{game}' has {players} player(s): give 1 model{either}, not {models}")
    if experiments:
        names = {game: list(dict.fromkeys(r["experiment"]["name"] for r in plan.rows)) for game, plan in plans.items()}
        everywhere = [n for ns in names.values() for n in ns]
        missing = [e for e in experiments if e not in everywhere]
        if missing:
            listing = "; ".join(f"{game}: {', '.join(ns)}" for game, ns in names.items())
            raise UsageError(f"no experiment {did_you_mean(missing, everywhere)} (experiments there: {listing})")
        for game, ns in names.items():
            if not set(ns) & set(experiments):
                raise UsageError(f"game '{game}' has none of the experiments {', '.join(experiments)} "
                                 f"(it has: {', '.join(ns)})")
    for plan in plans.values():
        rows = [r for r in plan.rows if not experiments or r["experiment"]["name"] in experiments]
        plan.rows = _first_per_experiment(rows, limit)
    return plans


def _instance_rows(spec: GameSpec, name: str) -> list[dict[str, Any]]:
    """The rows of the game's instances file ``in/<name>.json`` (read without touching ``spec``:
    clemcore's ``GameInstances.from_game_spec`` would set its ``instances``)."""
    folder = Path(spec.game_path) / "in"
    if not (folder / f"{name}.json").is_file():
        there = sorted(p.stem for p in folder.glob("*.json"))
        raise UsageError(f"game '{spec.game_name}' has no instances file {did_you_mean([name], there)} in {folder} "
                         f"(files there: {', '.join(there) or 'none'})")
    try:
        return list(GameInstances.from_file(spec.game_name, str(folder), name))
    except (ValueError, KeyError, TypeError) as exc:  # clemcore's own checks, or a malformed experiment
        raise UsageError(f"{folder / f'{name}.json'} is not a clemcore instances file: {type(exc).__name__}: {exc}") from exc


def _first_per_experiment(rows: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    seen: dict[str, int] = {}
    kept = []
    for row in rows:
        name = row["experiment"]["name"]
        seen[name] = seen.get(name, 0) + 1
        if limit is None or seen[name] <= limit:
            kept.append(row)
    return kept


def results_callbacks(results: Path, models: list[PolicyModel]) -> GameBenchmarkCallbackList:
    """The files ``clem run`` writes (clemcore 3.7's file savers: run.json, experiment.json,
    instance.json, interactions.json, the players' requests files and the completed/error signal),
    in clemcore's episode layout; the run folder is named after the models, as ``clem run`` names it."""
    folder = EpisodeResultsFolder(results, Model.to_identifier(models))
    infos = Model.to_infos(models)
    return GameBenchmarkCallbackList([
        EpisodeResultsFolderCallback(folder),  # first: numbers the episode the savers below write into
        InstanceFileSaver(folder),
        ExperimentFileSaver(folder, player_model_infos=infos),
        InteractionsFileSaver(folder, player_model_infos=infos),
        RunFileSaver(folder, player_model_infos=infos),
        PlayerFileSaver(folder),
        *([SignalFileSaver(folder)] if SignalFileSaver is not None else []),
    ])


def run_games(checkout: Path, games: list[str], policy: Policy | Mapping[str, Policy], out: Path, *,
              model_name: str = "rlplugs-policy", experiments: list[str] | None = None, instances: str | None = None,
              limit: int | None = None) -> ClemRun:
    """Play ``games`` of a clembench checkout; save records under ``out`` (a new directory or an
    empty one) and clemcore's results tree under ``out/clem-results``. ``policy``: one policy on
    every seat (named ``model_name``), or ``{model name: policy}`` with one per player. One game is
    open at a time: clembench games import sibling modules by bare name. A failed instance is
    skipped (as in ``clem run``, with clemcore's ``error.json`` in its episode folder) and listed in
    the result; if every instance fails, no record is written and a UsageError says why the first
    one failed."""
    out = Path(out)
    named: Mapping[str, Callable] = policy if isinstance(policy, Mapping) else {model_name: policy}
    plans = plan_run(checkout, games, out, experiments=experiments, instances=instances, limit=limit, models=len(named))
    models = [PolicyModel(p, name) for name, p in named.items()]
    callbacks = results_callbacks(out / CLEM_RESULTS, models)
    run = ClemRun()
    for game, plan in plans.items():
        with load_game(plan.spec) as bench:
            callbacks.on_benchmark_start(bench)
            for k, row in enumerate(plan.rows):
                game_id = row["game_instance"].get("game_id")
                try:
                    rec = play_instance(bench, row, models, callbacks)
                except Exception as exc:  # noqa: BLE001 - one broken instance must not end the run (as in clem run)
                    log.exception("%s: instance %s failed (continuing)", game, game_id)
                    run.failures.append((game, game_id, f"{type(exc).__name__}: {exc}"))
                    continue
                save_episode(out, rec, k)
                run.records.append(rec)
            callbacks.on_benchmark_end(bench)
    if not run.records:
        if not run.failures:
            raise UsageError(f"no instances to play in {', '.join(games)} (experiments {experiments}, limit {limit})")
        game, game_id, why = run.failures[0]
        raise UsageError(f"every instance failed ({len(run.failures)}), e.g. {game} {game_id}: {why}; "
                         "see clembench.log, and the clemcore versions each game runs with in the README")
    write_index(out, run.records)
    return run
