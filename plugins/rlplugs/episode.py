"""The multi-turn contract: episodes that advance one turn at a time, and the policies that play them.

Every multi-turn environment (crystal design with tool calls, multi-player text games) exposes
its episodes through :class:`Episode`, a small gym-like, *cloneable* state machine. One contract
serves every consumer:

- trainer adapters run ``while not ep.done: ep.step(policy(ep.observation()))`` and turn the
  acting seat's conversation into token ids with an environment mask;
- the verifiers bridge feeds ``observation()`` to ``interaction.turn(...)``;
- guidance (best-of-N, beam search) and Monte-Carlo PRM labels call :meth:`Episode.clone` to
  branch the game state and try candidate turns;
- evaluation, PRM labels and guidance play many episodes with the one lock-step runner here
  (:func:`play_lockstep`: one batched ``generate`` per round for every live episode).

Messages are plain chat dicts (``{"role": ..., "content": ...}``) so any chat template applies.

**Episodes stopped by an error.** An environment's ``step`` may raise (a judge or simulator
failing in a way the environment did not turn into a message), and so may starting an episode
for a row (a malformed row, a scene that cannot be built). Every adapter starts episodes with
:func:`start_episode` and plays them wrapped by :func:`guard`: the exception stops that episode alone
(one that could not start is stopped before its first turn), which is then ``done`` with
:func:`stop_reason` saying why (adapters also stop an episode that outlives their turn cap). That
reason is the one place the fact lives: :func:`rlplugs.rewards.score_components` reports every
reward component of such a sample unscored with it, so TRL gets ``None`` (NaN, left out of the
loss), verifiers an errored trace, evaluation and PRM labels an unscored sample, never the zeros
of an episode scored "as it stands".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rlplugs.rewards import Score

log = logging.getLogger(__name__)

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


class GuardedEpisode:
    """An episode whose ``step`` never raises: an exception stops it, with the reason kept in
    :attr:`stopped` (see the module docstring). Everything else is the wrapped episode's."""

    def __init__(self, episode: Episode):
        self.episode = episode
        self.stopped: str | None = None

    def __getattr__(self, name: str) -> Any:  # the wrapped episode's own attributes (finish_reason, ...)
        if name.startswith("__") or name in ("episode", "stopped"):  # unpickling asks before __dict__ is set
            raise AttributeError(name)
        return getattr(self.episode, name)

    @property
    def done(self) -> bool:
        return self.stopped is not None or self.episode.done

    @property
    def current_seat(self) -> str:
        return self.episode.current_seat

    @property
    def trained_seats(self) -> Sequence[str]:
        return self.episode.trained_seats

    def observation(self) -> list[Message]:
        return self.episode.observation()

    def transcript(self, seat: str) -> list[Message]:
        return self.episode.transcript(seat)

    def step(self, text: str) -> StepResult:
        if self.stopped is not None:
            raise RuntimeError(f"step() on an episode that was stopped ({self.stopped})")
        try:
            return self.episode.step(text)
        except Exception as exc:  # noqa: BLE001 - one broken episode must not end the batch
            self.stopped = f"episode stopped by an error: {type(exc).__name__}: {exc}"  # even if it half-ended
            log.warning("%s", self.stopped)
            return StepResult(True, {"stopped": self.stopped})

    def stop(self, reason: str) -> None:
        """End the episode from outside (an adapter's turn cap); the first reason is kept, and an
        episode that already ended on its own is left as it is."""
        if self.stopped is None and not self.episode.done:
            self.stopped = reason

    def scores(self) -> dict[str, Score]:
        if self.stopped is not None:
            from rlplugs.rewards import Unscorable

            raise Unscorable(self.stopped)
        return self.episode.scores()

    def clone(self) -> GuardedEpisode:
        twin = GuardedEpisode(self.episode.clone())
        twin.stopped = self.stopped
        return twin

    def record(self) -> dict[str, Any]:
        record = self.episode.record()
        return record if self.stopped is None else {**record, "stopped": self.stopped}


def guard(episode: Episode) -> GuardedEpisode:
    """``episode`` wrapped so that an error in ``step`` stops it instead of raising (idempotent)."""
    return episode if isinstance(episode, GuardedEpisode) else GuardedEpisode(episode)


def start_episode(factory: EpisodeFactory, row: dict[str, Any]) -> GuardedEpisode:
    """The guarded episode ``factory`` starts for ``row``; if the factory raises, an episode that
    is stopped before its first turn with the reason, so a batch keeps one episode per row (TRL
    needs a completion for every prompt) and that row's sample is unscored, not lost."""
    try:
        return guard(factory(row))
    except Exception as exc:  # noqa: BLE001 - one row that cannot start must not end the batch
        episode = GuardedEpisode(_Unstarted(row))
        episode.stopped = f"episode could not start: {type(exc).__name__}: {exc}"
        log.warning("%s", episode.stopped)
        return episode


class _Unstarted:
    """What stands for an episode its factory could not start: over before any turn, showing the
    row's prompt as its conversation (the trained seat's sample is that prompt, unscored)."""

    def __init__(self, row: dict[str, Any]):
        prompt = row.get("prompt")
        self.messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt or [])
        self.seat = str(row.get("seat") or "player")

    done = True
    current_seat = property(lambda self: self.seat)
    trained_seats = property(lambda self: (self.seat,))

    def observation(self) -> list[Message]:
        return list(self.messages)

    def transcript(self, seat: str) -> list[Message]:
        return list(self.messages)

    def step(self, text: str) -> StepResult:
        raise RuntimeError("step() on an episode that could not start")

    def scores(self) -> dict[str, Score]:
        return {}  # never asked: the guard reports the episode unscored with its reason

    def clone(self) -> _Unstarted:
        return self

    def record(self) -> dict[str, Any]:
        return {"messages": self.messages}


def stop_reason(episode: Any) -> str | None:
    """Why ``episode`` was stopped before it ended (an error, an adapter's cap); ``None`` when it
    was not (also for anything that is not a guarded episode, e.g. a record dict)."""
    reason = getattr(episode, "stopped", None)
    return reason if isinstance(reason, str) else None


def last_reply(episode: Episode, seat: str) -> str:
    """The last assistant message ``seat`` wrote in ``episode`` ("" if none): the completion an
    episode's components and reports score for that seat."""
    replies = [m for m in episode.transcript(seat) if m.get("role") == "assistant"]
    return str(replies[-1].get("content", "")) if replies else ""


# --- the lock-step runner ----------------------------------------------------------------------
# Evaluation, PRM labels and guidance play many episodes together: every round collects the
# observation of each unfinished episode (whatever seat is to move) and answers them all with one
# BatchPolicy.generate call, which is what keeps a GPU busy. (The TRL rollout plays in lock-step
# too, but on token ids through TRL's generation, not through a BatchPolicy.)


class _OneAtATime:
    """A plain :class:`Policy` answering a batch one conversation at a time."""

    def __init__(self, policy: Policy):
        self.policy = policy

    def __call__(self, messages: list[Message]) -> str:
        return self.policy(messages)

    def generate(self, conversations: list[list[Message]], n: int = 1) -> list[list[str]]:
        return [[self.policy(c) for _ in range(n)] for c in conversations]


def as_batch_policy(policy: Policy | BatchPolicy) -> BatchPolicy:
    """``policy`` itself when it already answers batches, else a per-conversation wrapper."""
    return policy if callable(getattr(policy, "generate", None)) else _OneAtATime(policy)


def advance(episodes: Sequence[Episode], policy: BatchPolicy) -> list[Episode]:
    """Play one turn in every unfinished episode with one batched call; returns those that moved."""
    live = [ep for ep in episodes if not ep.done]
    if live:
        replies = policy.generate([ep.observation() for ep in live], n=1)
        for ep, reply in zip(live, replies, strict=True):
            ep.step(reply[0])
    return live


def play_lockstep(
    episodes: Sequence[Episode], policy: BatchPolicy, max_turns: int = 1000,
    on_done: Callable[[Episode], None] | None = None,
) -> None:  # fmt: skip
    """Play every episode to its end, one ``generate`` call per round for all live episodes.

    An episode still running after ``max_turns`` of its turns is stopped with that reason when it
    is guarded (its sample is then unscored), and raises ``RuntimeError`` otherwise. ``on_done``
    is called once per episode as it ends (progress bars)."""
    turns = [0] * len(episodes)
    index = {id(ep): i for i, ep in enumerate(episodes)}
    while moved := advance(episodes, policy):
        for ep in moved:
            i = index[id(ep)]
            turns[i] += 1
            if not ep.done and turns[i] >= max_turns:
                reason = f"episode did not end within {max_turns} turns"
                if not isinstance(ep, GuardedEpisode):
                    raise RuntimeError(reason)
                ep.stop(reason)
            if ep.done and on_done is not None:
                on_done(ep)


def advance_until_learner(episodes: Sequence[Episode], policy: BatchPolicy, max_turns: int = 1000) -> None:
    """Let the other seats play (batched) until each episode is done or a trained seat is to move."""
    for _ in range(max_turns):
        waiting = [ep for ep in episodes if not ep.done and ep.current_seat not in ep.trained_seats]
        if not waiting:
            return
        advance(waiting, policy)
    raise RuntimeError(f"no trained seat got a turn within {max_turns} turns")


def play(episode: Episode, policy: Policy, max_turns: int = 1000) -> Episode:
    """Play ``episode`` to its end with one policy on every seat; returns the same episode."""
    play_lockstep([episode], as_batch_policy(policy), max_turns)
    return episode
