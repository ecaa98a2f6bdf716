"""Play many episodes together, one batched generation call per round.

Monte-Carlo labels finish hundreds of cloned episodes and beam search keeps several beams alive;
playing them one by one would send the model one conversation at a time. Here every round
collects the observation of each unfinished episode (whatever seat is to move) and answers them
all with a single :meth:`~rlplugs.episode.BatchPolicy.generate` call, which is what keeps a GPU
busy. Callers pass guarded episodes (:func:`rlplugs.episode.guard`), so an error in one
episode's ``step`` stops that episode instead of the whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlplugs import BatchPolicy, Episode


def advance(episodes: Sequence[Episode], policy: BatchPolicy) -> int:
    """Play one turn in every unfinished episode with one batched call; returns how many moved."""
    live = [ep for ep in episodes if not ep.done]
    if not live:
        return 0
    replies = policy.generate([ep.observation() for ep in live], n=1)
    for ep, reply in zip(live, replies, strict=True):
        ep.step(reply[0])
    return len(live)


def finish(episodes: Sequence[Episode], policy: BatchPolicy, max_turns: int = 1000) -> None:
    """Play every episode to its end (in lockstep); raise if one outlives ``max_turns`` rounds."""
    for _ in range(max_turns):
        if not advance(episodes, policy):
            return
    if any(not ep.done for ep in episodes):
        raise RuntimeError(f"episode did not end within {max_turns} turns")


def advance_until_learner(episodes: Sequence[Episode], policy: BatchPolicy, max_turns: int = 1000) -> None:
    """Let the other seats play (batched) until each episode is done or a trained seat is to move."""
    for _ in range(max_turns):
        waiting = [ep for ep in episodes if not ep.done and ep.current_seat not in ep.trained_seats]
        if not waiting:
            return
        advance(waiting, policy)
    raise RuntimeError(f"no trained seat got a turn within {max_turns} turns")
