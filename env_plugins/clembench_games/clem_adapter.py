"""Play the games of a user's own clembench checkout through clemcore, with an rlplugs policy as
the clemcore model, scored by each game's own scorer.

Why a separate route: rlplugs may not copy clembench's games, and clemcore 3.7 (anthropic<1)
cannot share an environment with verifiers 0.4.0 (anthropic>=1). So this module is only imported
where the ``clem`` extra is installed (its own venv, see the README), never by the plugin.

How it plays (clemcore's own game masters, not ours):

- :class:`PolicyModel` is a clemcore ``Model`` whose ``generate_response(messages)`` asks the
  policy with the player's whole perspective (``Player.__call__`` keeps memory, merges the initial
  prompt and forgets extras, exactly as in ``clem run``) and logs every call;
- :func:`play_instance` loads nothing itself: it drives ``create_game_master`` / ``setup`` /
  ``before_game`` / ``get_context_for`` / ``step`` of the game's ``GameBenchmark``; one policy on all
  roles is clembench's self-play. Each player gets its own :class:`SeatModel` (a view on the one
  policy) so every call is logged under the seat that made it, also the calls a game master makes
  by itself in ``before_game`` or ``step`` (e.g. privateshared's probe rounds);
- the episode is scored with ``create_game_scorer(...).compute_scores(interactions)`` from a
  ``GameInteractionsRecorder``; legacy games never set the clemcore outcome, so the game's scorer
  is the only source of Main Score / Aborted / Success / Lose;
- clemcore's file-saver callbacks write the standard results tree
  (``<out>/clem-results/<run>/<game>/<experiment>/...``) for ``clem score`` / ``clem eval``, and each
  episode is also saved as an rlplugs record (JSON + HTML), so ``rlplugs games score`` and
  ``rlplugs games sft-data`` work on these runs unchanged.

What a user sees: clemcore sends its log to ``clembench.log`` in the working directory, so a failed
instance is also returned (:class:`ClemRun` ``.failures``) for the CLI to print; a run in which
every instance failed is a :class:`UsageError`, and so is an ``out`` that already holds a run (a
second run would overwrite its episodes).
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clemcore.backends.model_registry import Model, ModelSpec
from clemcore.clemgame import GameBenchmark, GameInstances, GameInteractionsRecorder, GameSpec
from clemcore.clemgame.callbacks import episode_results_folder_callbacks

from rlplugs import Policy, UsageError

from clembench_games.transcripts import save_episode, write_index

log = logging.getLogger(__name__)

CLEM_METRICS = ("Aborted", "Lose", "Success", "Main Score", "Request Count", "Parsed Request Count", "Violated Request Count")


class PolicyModel(Model):
    """An rlplugs policy seen as a clemcore model; remembers every call for SFT/PRM data."""

    def __init__(self, policy: Policy, name: str = "rlplugs-policy", temperature: float = 0.0, max_tokens: int = 300):
        super().__init__(ModelSpec(model_name=name, backend="rlplugs"))
        self.set_gen_args(temperature=temperature, max_tokens=max_tokens)
        self.policy = policy
        self.calls: list[dict[str, Any]] = []

    def generate_response(self, messages: list[dict], seat: str = "unknown") -> tuple[Any, Any, str]:
        chat = [{"role": m["role"], "content": m["content"]} for m in messages]
        text = self.policy(copy.deepcopy(chat))
        self.calls.append({"seat": seat, "messages": chat, "response": text, "verdict": "ok"})
        return chat, {"response": text, "backend": "rlplugs"}, text


class SeatModel(Model):
    """One player's handle on the shared :class:`PolicyModel`: same name and generation settings,
    every call logged under ``seat`` (known once the game master has set its players up)."""

    def __init__(self, shared: PolicyModel):
        super().__init__(shared.model_spec)
        self.set_gen_args(temperature=shared.temperature, max_tokens=shared.max_tokens)
        self.shared = shared
        self.seat = "unknown"

    def generate_response(self, messages: list[dict]) -> tuple[Any, Any, str]:
        return self.shared.generate_response(messages, self.seat)


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


def load_game(checkout: Path, game: str) -> GameBenchmark:
    """The ``GameBenchmark`` of ``game`` in a clembench checkout, from whichever
    ``<checkout>/<dir>/clemgame.json`` declares it."""
    specs = game_specs(checkout)
    if game not in specs:
        known = ", ".join(sorted(specs)) or "none: is it a clembench checkout?"
        raise UsageError(f"no game '{game}' in {checkout} (games there: {known})")
    try:
        return GameBenchmark.load_from_spec(specs[game])
    except Exception as exc:  # noqa: BLE001 - the game's own code: a missing package or data (NLTK's stopwords for taboo)
        why = next((line.strip(" *") for line in str(exc).splitlines() if line.strip(" *")), "")
        raise UsageError(f"game '{game}' did not load from {specs[game].game_path}: {type(exc).__name__}: {why}; "
                         "install what the checkout's requirements.txt and the game's README ask for") from exc


def play_instance(bench: GameBenchmark, row: dict, model: PolicyModel, callbacks=None) -> dict[str, Any]:
    """Play one instance row (``GameInstances`` row) in self-play; returns an rlplugs record."""
    experiment, instance = row["experiment"], row["game_instance"]
    models = [SeatModel(model) for _ in range(bench.game_spec.players)]
    gm = bench.create_game_master(experiment, models)
    gm.setup(**instance)
    seats = seat_names(gm.get_players())
    for player in gm.get_players():
        if isinstance(player.model, SeatModel):
            player.model.seat = seats[player.name]
    recorder = GameInteractionsRecorder(bench.game_name, experiment["name"], instance["game_id"], "", Model.to_infos(models))
    for player in gm.get_players():
        recorder.log_player(player.name, player.game_role, player.model.name)
    gm.register(recorder)
    if callbacks is not None:
        callbacks.on_game_start(gm, instance)
    first_call = len(model.calls)
    gm.before_game()  # may ask the players already (privateshared's first probe round)
    done = False
    while not done:
        player = gm.current_player
        done, _ = gm.step(player(gm.get_context_for(player)))
    if callbacks is not None:
        callbacks.on_game_end(gm, instance)
    scorer = bench.create_game_scorer(experiment, instance)
    scorer.compute_scores(recorder.interactions)
    scores = scorer.scores["episode scores"]
    return _record(bench.game_name, experiment, instance, scores, model.calls[first_call:], set(seats.values()))


def seat_names(players: list) -> dict[str, str]:
    """Player name -> seat: the game role, or "role (Player N)" where two players share a role."""
    roles = [p.game_role for p in players]
    return {p.name: p.game_role if roles.count(p.game_role) == 1 else f"{p.game_role} ({p.name})" for p in players}


def _record(game: str, experiment: dict, instance: dict, scores: dict, calls: list[dict], roles: set[str]) -> dict[str, Any]:
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
        "seats": sorted(roles),
        "trained_seats": sorted(roles),
        "partner": "self-play",
        "outcome": outcome,
        "abort_reason": "aborted (see the game's interactions.json)" if aborted else None,
        "metrics": metrics,
        "events": [],
        "turns": calls,
        "source": "clemcore",
    }


def check_run(checkout: Path, games: list[str], out: Path) -> None:
    """Refuse, before anything is loaded or played, an ``out`` that already holds files (a second
    run would overwrite the first one's episodes) and a game the checkout does not declare."""
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty (an earlier run?): a new run would overwrite its episodes; pass a new --out")
    specs = game_specs(checkout)
    for game in games:
        if game not in specs:
            load_game(checkout, game)  # raises the one "no game ... (games there: ...)" error


def run_games(checkout: Path, games: list[str], policy: Policy, out: Path, *, model_name: str = "rlplugs-policy",
              experiments: list[str] | None = None, limit: int | None = None) -> ClemRun:
    """Play ``games`` of a clembench checkout with ``policy`` in self-play; save records under
    ``out`` (a new directory or an empty one) and the clemcore results tree under
    ``out/clem-results``. ``limit`` caps instances per game. One game is open at a time: clembench
    games import sibling modules by bare name. A failed instance is skipped (as in ``clem run``)
    and listed in the result; if every instance fails, nothing is written and a UsageError says
    why the first one failed."""
    out = Path(out)
    check_run(checkout, games, out)
    model = PolicyModel(policy, model_name)
    callbacks = episode_results_folder_callbacks(run_dir=model_name, result_dir_path=out / "clem-results",
                                                 player_model_infos=Model.to_infos([model]))
    run = ClemRun()
    for game in games:
        with load_game(checkout, game) as bench:
            rows = list(GameInstances.from_game_spec(bench.game_spec))
            rows = [r for r in rows if experiments is None or r["experiment"]["name"] in experiments][:limit]
            callbacks.on_benchmark_start(bench)
            for k, row in enumerate(rows):
                game_id = row["game_instance"].get("game_id")
                try:
                    rec = play_instance(bench, row, model, callbacks)
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
