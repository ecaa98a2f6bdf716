"""The game master: turn order, per-seat conversations, parse rules, aborts, and the Episode protocol.

A game (``wordle.py``, ``taboo.py``, ...) subclasses :class:`GameMaster` and only writes its rules:
``opening()`` sends the first prompts, ``on_reply(seat, text)`` parses one reply and either asks
the next seat (``ask``), ends the game (``win``/``lose``) or stops it for a rule violation
(``abort``). Everything else, shared by all games, lives here:

- **seats** are the roles an LLM can play; each keeps its own chat (the role's rules are merged
  into its first user message, as clembench merges the initial prompt into the first context).
  A seat's chat only grows: every request and reply stays in it, which is what the trainer
  adapters need to train on one conversation per seat (see privateshared for the one place
  where clembench differs);
- :class:`GameEpisode` puts a policy on the trained seats and a scripted player on the others, so
  ``current_seat`` is always a trained seat; every reply of every seat is logged as a turn
  (its observation and reply), which is what turn-level SFT data and PRM labels are made of.

Episode metrics follow clembench's definitions: Aborted (rule or format violation), Played =
1 - Aborted, Success and Lose (both 0 when aborted), Main Score in [0, 100] (NaN when aborted),
and request counts.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlplugs import Message, Score, StepResult

class GameError(RuntimeError):
    """The game master was driven wrongly (a reply when no seat is asked, a finished game)."""


@dataclass
class Request:
    seat: str
    content: str


@dataclass
class Turn:
    """One reply: who, what they saw, what they said, and what the game master made of it."""

    seat: str
    messages: list[Message]
    response: str
    verdict: str = "ok"


class GameMaster:
    """One game's state and rules. Subclasses set ``name``, ``seats`` and ``rules``, and implement
    ``opening``, ``on_reply``, ``main_score`` and the scripted ``perfect``/``random`` moves."""

    name: ClassVar[str]
    seats: ClassVar[tuple[str, ...]]
    #: Per seat: the role's rules, formatted with the instance (``str.format(**instance)``).
    rules: ClassVar[dict[str, str]]
    #: Safety net against a game that keeps asking (each game has its own, smaller, limits).
    max_requests: ClassVar[int] = 100

    def __init__(self, instance: dict[str, Any]):
        self.instance = instance
        self.outcome = "running"  # running | success | failure | aborted
        self.abort_reason: str | None = None
        self.request: Request | None = None
        self.requests = 0
        self.parsed = 0
        self.violated = 0
        self.log: list[str] = []  # game-master events, shown in transcripts

    # --- what games call -------------------------------------------------------------------
    def ask(self, seat: str, content: str) -> None:
        self.request = Request(seat, content)

    def win(self, note: str = "") -> None:
        self._end("success", note)

    def lose(self, note: str = "") -> None:
        self._end("failure", note)

    def abort(self, reason: str) -> None:
        """Stop the game for a rule or format violation of the current reply."""
        self.violated += 1
        self.abort_reason = reason
        self._end("aborted", reason)

    def _end(self, outcome: str, note: str) -> None:
        self.outcome = outcome
        self.request = None
        if note:
            self.log.append(f"{outcome}: {note}")

    # --- what games implement ---------------------------------------------------------------
    def opening(self) -> None:
        raise NotImplementedError

    def on_reply(self, seat: str, text: str) -> None:
        raise NotImplementedError

    def main_score(self) -> float:
        """Main Score in [0, 100] of a finished, not aborted game."""
        raise NotImplementedError

    def perfect(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        raise NotImplementedError

    def random(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        raise NotImplementedError

    # --- driving ----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.outcome != "running"

    def reply(self, text: str) -> None:
        if self.done or self.request is None:
            raise GameError(f"{self.name}: no seat is asked to reply (outcome {self.outcome})")
        seat = self.request.seat
        self.request = None
        self.requests += 1
        violated = self.violated
        self.on_reply(seat, text)
        if self.violated == violated:
            self.parsed += 1
        if not self.done and self.request is None:
            raise GameError(f"{self.name}: on_reply neither asked a seat nor ended the game")
        if not self.done and self.requests >= self.max_requests:
            self.abort(f"no end after {self.max_requests} requests")

    def metrics(self) -> dict[str, float]:
        """clembench's episode scores (Main Score is NaN when aborted)."""
        if not self.done:
            raise GameError(f"{self.name}: metrics of a running game")
        aborted = self.outcome == "aborted"
        return {
            "Aborted": float(aborted),
            "Played": float(not aborted),
            "Success": float(self.outcome == "success"),
            "Lose": float(self.outcome == "failure"),
            "Main Score": math.nan if aborted else float(self.main_score()),
            "Request Count": float(self.requests),
            "Parsed Request Count": float(self.parsed),
            "Violated Request Count": float(self.violated),
        }


@dataclass
class GameEpisode:
    """A :class:`GameMaster` with a policy on ``trained_seats`` and scripted players elsewhere;
    implements :class:`rlplugs.episode.Episode`."""

    game: GameMaster
    trained_seats: tuple[str, ...]
    partner: str = "perfect"  # scripted player on the other seats: "perfect" or "random"
    seed: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.trained_seats) - set(self.game.seats)
        if unknown or not self.trained_seats:
            raise ValueError(f"{self.game.name}: trained seats {sorted(unknown) or '(none)'}; seats are {self.game.seats}")
        self.rng = random.Random(self.seed)
        self.history: dict[str, list[Message]] = {s: [] for s in self.game.seats}
        self.greeted: set[str] = set()
        self.turns: list[Turn] = []
        self.game.opening()
        self._play_partners()

    # --- Episode protocol ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.game.done

    @property
    def current_seat(self) -> str:
        if self.game.request is None:
            raise GameError(f"{self.game.name}: episode is over ({self.game.outcome})")
        return self.game.request.seat

    def observation(self) -> list[Message]:
        request = self.game.request
        if request is None:
            raise GameError(f"{self.game.name}: episode is over ({self.game.outcome})")
        content = request.content
        if request.seat not in self.greeted:
            content = self.game.rules[request.seat].format(**self.game.instance) + "\n\n" + content
        return [*self.history[request.seat], {"role": "user", "content": content}]

    def step(self, text: str) -> StepResult:
        self._reply(text)
        self._play_partners()
        return StepResult(self.done, {"outcome": self.game.outcome, "reason": self.game.abort_reason})

    def scores(self) -> dict[str, Score]:
        """Reward components. An aborted game is a real 0 with its reason, not an unscored one."""
        if not self.done:
            return {n: Score(None, "episode not finished") for n in ("main_score", "played", "success")}
        m = self.game.metrics()
        if m["Aborted"]:
            why = f"aborted: {self.game.abort_reason}"
            return {"main_score": Score(0.0, why), "played": Score(0.0, why), "success": Score(0.0, why)}
        return {
            "main_score": Score(m["Main Score"] / 100.0),
            "played": Score(1.0),
            "success": Score(m["Success"]),
        }

    def transcript(self, seat: str) -> list[Message]:
        return list(self.history[seat])

    def clone(self) -> GameEpisode:
        return copy.deepcopy(self)

    def record(self) -> dict[str, Any]:
        metrics = self.game.metrics() if self.done else {}
        return {
            **self.meta,
            "game": self.game.name,
            "instance": self.game.instance,
            "seats": list(self.game.seats),
            "trained_seats": list(self.trained_seats),
            "partner": self.partner,
            "outcome": self.game.outcome,
            "abort_reason": self.game.abort_reason,
            "metrics": {k: (None if v != v else v) for k, v in metrics.items()},  # NaN -> null for JSON
            "events": list(self.game.log),
            "turns": [t.__dict__ for t in self.turns],
        }

    # --- internals ----------------------------------------------------------------------------
    def _reply(self, text: str) -> None:
        request = self.game.request
        if request is None:
            raise GameError(f"{self.game.name}: step() on a finished episode")
        messages = self.observation()
        self.greeted.add(request.seat)
        self.game.reply(text)
        verdict = f"aborted: {self.game.abort_reason}" if self.game.outcome == "aborted" else "ok"
        self.turns.append(Turn(request.seat, messages, text, verdict))
        self.history[request.seat] = [*messages, {"role": "assistant", "content": text}]

    def _play_partners(self) -> None:
        moves = {"perfect": self.game.perfect, "random": self.game.random}[self.partner]
        while not self.done and self.game.request.seat not in self.trained_seats:
            self._reply(moves(self.game.request.seat, self.observation(), self.rng))


def play_scripted(game: GameMaster, style: str, seed: int = 0, meta: dict[str, Any] | None = None) -> GameEpisode:
    """Play a whole game with the ``style`` ("perfect" or "random") scripted player on every seat."""
    moves = {"perfect": game.perfect, "random": game.random}[style]
    episode = GameEpisode(game, game.seats, partner=style, seed=seed, meta=dict(meta or {}))
    while not episode.done:
        episode.step(moves(episode.current_seat, episode.observation(), episode.rng))
    return episode
