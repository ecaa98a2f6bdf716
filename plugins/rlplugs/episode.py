"""The multi-turn contract: episodes that advance one turn at a time, and the policies that play them.

Every multi-turn environment (crystal design with tool calls, multi-player text games) exposes
its episodes through :class:`Episode`, a small gym-like, *cloneable* state machine. One contract
serves every consumer:

- trainer adapters run ``while not ep.done: ep.step(policy(ep.observation()))`` and turn the
  acting seat's conversation into token ids with an environment mask;
- the verifiers bridge feeds ``observation()`` to ``interaction.turn(...)``;
- guidance (best-of-N, beam search) and Monte-Carlo PRM labels call :meth:`Episode.clone` to
  branch the game state and try candidate turns.

Messages are plain chat dicts (``{"role": ..., "content": ...}``) so any chat template applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rlplugs.rewards import Score

Message = dict[str, Any]


@dataclass
class StepResult:
    """What one turn did: whether the episode ended, and a note for logs/transcripts."""

    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Episode(Protocol):
    """One running episode of a multi-turn environment.

    ``current_seat`` is the seat whose turn it is (``"player"`` in single-agent envs).
    ``observation()`` is that seat's whole conversation so far (system + history), ready for a
    chat template. ``step(text)`` applies the seat's reply. ``scores()`` gives the reward
    components once ``done``. ``transcript(seat)`` is the seat's conversation *including* its own
    replies (one training sample per seat). ``clone()`` is an independent deep copy.
    """

    @property
    def done(self) -> bool: ...

    @property
    def current_seat(self) -> str: ...

    @property
    def trained_seats(self) -> Sequence[str]: ...

    def observation(self) -> list[Message]: ...

    def step(self, text: str) -> StepResult: ...

    def scores(self) -> dict[str, Score]: ...

    def transcript(self, seat: str) -> list[Message]: ...

    def clone(self) -> Episode: ...

    def record(self) -> dict[str, Any]: ...


class EpisodeFactory(Protocol):
    """Starts an episode for one dataset row (``row`` is the dict the dataset yields)."""

    def __call__(self, row: dict[str, Any]) -> Episode: ...


class Policy(Protocol):
    """Something that writes the next turn of a conversation."""

    def __call__(self, messages: list[Message]) -> str: ...


class BatchPolicy(Protocol):
    """A policy that can answer many conversations at once, ``n`` samples each."""

    def generate(self, conversations: list[list[Message]], n: int = 1) -> list[list[str]]: ...


class Guidance(Protocol):
    """An inference-time search strategy (best-of-N, beam) that plays an episode to the end."""

    def play(self, episode: Episode, policy: BatchPolicy) -> Episode: ...


def play(episode: Episode, policy: Policy, max_turns: int = 1000) -> Episode:
    """Play ``episode`` to its end with one policy on every seat; returns the same episode."""
    turns = 0
    while not episode.done:
        if turns >= max_turns:
            raise RuntimeError(f"episode did not end within {max_turns} turns")
        episode.step(policy(episode.observation()))
        turns += 1
    return episode
