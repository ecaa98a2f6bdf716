"""Turn-level PRM training data from the policy's own rollouts.

A process reward model scores one candidate turn in its context: "how likely is the game won from
here if I say this?". Its training rows all have one format, whatever produced the label::

    {"messages": [...context..., {"role": "assistant", "content": candidate}],
     "label": 0.0-1.0, "meta": {"method": ..., "turn": ..., "seat": ..., ...}}

Two ways to label, both for any multi-turn environment through the :class:`~rlplugs.episode.Episode`
protocol:

- **Monte Carlo** (:func:`monte_carlo_labels`): at each learner turn, sample a few candidate turns,
  then for each candidate :meth:`~rlplugs.episode.Episode.clone` the game ``k`` times, apply the
  candidate and let the policy finish; the label is the mean outcome of those continuations. It
  tells candidates *at the same state* apart, which is exactly what best-of-N and beam search
  need, at ``turns x candidates x k`` rollouts per episode (all continuations are played in
  lockstep, one batched generation call per round).
  The candidates may also come from a :class:`~rlplugs.builtins.prm.guidance.Proposer` while a
  greedy ``policy`` plays the rest: the greedy reply first, samples after it, each valued by the
  greedy play that follows it. That is the choice best-of-N with ``policy_reply`` makes at test
  time (its other turns greedy), and what its outcome bound reads off the game.
- **Outcome-propagated** (:func:`outcome_labels`): every learner turn of a finished episode gets
  the episode's outcome. One rollout per episode, but every turn of a lost game is blamed equally.

The *outcome* of an episode is a weighted mean of its reward components (e.g. ``{"success": 1}``),
clipped to [0, 1]. An episode whose outcome cannot be computed (an unscored component, or an
episode stopped by an error: every game here is played guarded, :func:`rlplugs.episode.guard`)
gives no label; it is counted and logged, never turned into a 0.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlplugs import BatchPolicy, Episode, Message, advance_until_learner, guard, play_lockstep, stop_reason
from rlplugs.builtins.prm.guidance import Proposer

log = logging.getLogger(__name__)

Row = dict[str, Any]


def outcome_value(episode: Episode, weights: Mapping[str, float]) -> float | None:
    """Weighted mean of the finished episode's components named in ``weights``, clipped to [0, 1];
    ``None`` when one of them is unscored or an error stopped the episode."""
    if stop_reason(episode) is not None:
        return None
    scores = episode.scores()
    missing = [name for name in weights if name not in scores]
    if missing:
        raise KeyError(f"outcome components {missing} not among the episode's scores {sorted(scores)}")
    if any(not scores[name].scored for name in weights):
        return None
    total = sum(weights.values())
    value = sum(w * scores[name].value for name, w in weights.items()) / total
    return min(1.0, max(0.0, value))


def make_row(context: list[Message], candidate: str, label: float, **meta: Any) -> Row:
    """One PRM training row: the context, the candidate turn as the last message, the label."""
    return {"messages": [*context, {"role": "assistant", "content": candidate}], "label": float(label), "meta": meta}


def outcome_labels(episodes: Sequence[Episode], weights: Mapping[str, float]) -> list[Row]:
    """Label every trained-seat turn of finished ``episodes`` with its episode's outcome."""
    rows: list[Row] = []
    unscored = 0
    for index, episode in enumerate(episodes):
        if not episode.done:
            raise ValueError(f"episode {index} is not finished; play it before labelling")
        value = outcome_value(episode, weights)
        if value is None:
            unscored += 1
            continue
        for seat in episode.trained_seats:
            messages = episode.transcript(seat)
            turn = 0
            for i, message in enumerate(messages):
                if message["role"] == "assistant":
                    rows.append(make_row(messages[:i], message["content"], value,
                                         method="outcome", episode=index, seat=seat, turn=turn))  # fmt: skip
                    turn += 1
    if unscored:
        log.warning("outcome labels: %d of %d episodes unscored, skipped", unscored, len(episodes))
    return rows


def monte_carlo_labels(
    episodes: Sequence[Episode],
    policy: BatchPolicy,
    weights: Mapping[str, float],
    *,
    k: int = 4,
    candidates: int | Proposer = 2,
    max_turns: int = 1000,
) -> list[Row]:
    """Monte-Carlo labels for every learner turn of ``episodes`` (played here, in lockstep).

    Each learner turn gets ``candidates`` turns sampled from ``policy``, or those a
    :class:`~rlplugs.builtins.prm.guidance.Proposer` makes (the first one continues the main
    game); each candidate is applied to ``k`` clones of the state before the turn, which
    ``policy`` finishes; the label is the mean outcome of the scored continuations.
    """
    propose = candidates if isinstance(candidates, Proposer) else Proposer(policy, candidates, None)
    if k < 1 or propose.n < 1:
        raise ValueError(f"need k >= 1 and candidates >= 1, got k={k}, candidates={propose.n}")
    branches = _main_rollouts(episodes, policy, propose, max_turns)
    continuations: list[Episode] = []
    for branch in branches:
        for candidate in branch["candidates"]:
            for _ in range(k):
                clone = branch["state"].clone()
                clone.step(candidate)
                continuations.append(clone)
    play_lockstep(continuations, policy, max_turns)

    rows: list[Row] = []
    dropped = 0
    games = iter(continuations)
    for branch in branches:
        for c, candidate in enumerate(branch["candidates"]):
            values = [outcome_value(next(games), weights) for _ in range(k)]
            scored = [v for v in values if v is not None]
            if not scored:
                dropped += 1
                continue
            rows.append(make_row(branch["context"], candidate, sum(scored) / len(scored),
                                 method="monte_carlo", episode=branch["episode"], seat=branch["seat"],
                                 turn=branch["turn"], candidate_index=c, continuations=k, scored=len(scored)))  # fmt: skip
    if dropped:
        log.warning("monte-carlo labels: %d candidates had no scored continuation, skipped", dropped)
    return rows


def _main_rollouts(episodes: Sequence[Episode], policy: BatchPolicy, propose: Proposer, max_turns: int) -> list[dict]:
    """Play each episode once, proposing candidates at every learner turn (continuing with the
    first); return the branch points: state before the turn, context, candidates."""
    games = [guard(ep.clone()) for ep in episodes]
    turns = [0] * len(games)
    branches: list[dict] = []
    for _ in range(max_turns):
        advance_until_learner(games, policy, max_turns)
        movers = [i for i, ep in enumerate(games) if not ep.done]
        if not movers:
            return branches
        contexts = [games[i].observation() for i in movers]
        samples = propose(contexts)
        for i, context, texts in zip(movers, contexts, samples, strict=True):
            branches.append({"episode": i, "seat": games[i].current_seat, "turn": turns[i],
                             "state": games[i].clone(), "context": context, "candidates": list(texts)})  # fmt: skip
            games[i].step(texts[0])
            turns[i] += 1
    raise RuntimeError(f"episode did not end within {max_turns} learner turns")


def save_rows(rows: Sequence[Row], path: str | Path) -> Path:
    """Write PRM rows as JSON lines (the format ``rlplugs prm train --data`` reads)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def load_rows(path: str | Path) -> list[Row]:
    """Read and check PRM rows; a malformed line is an error naming the file, line and problem."""
    rows: list[Row] = []
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such file; pass the JSON-lines file `rlplugs prm label --out` wrote")
    with Path(path).open() as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                _check_row(row)
            except (ValueError, TypeError, KeyError) as exc:
                raise ValueError(f"{path}:{number}: not a PRM row ({exc})") from exc
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no PRM rows")
    return rows


def _check_row(row: Any) -> None:
    missing = [key for key in ("messages", "label") if not isinstance(row, dict) or key not in row]
    if missing:
        raise ValueError(f"no {' or '.join(repr(key) for key in missing)}")
    messages = row["messages"]
    if not isinstance(messages, list) or not messages or messages[-1].get("role") != "assistant":
        raise ValueError("'messages' must be a chat list ending with the candidate assistant turn")
    label = float(row["label"])
    if not 0.0 <= label <= 1.0:
        raise ValueError(f"label {label} outside [0, 1]")
