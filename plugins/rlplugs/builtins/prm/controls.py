"""Controls for PRM best-of-N: the same candidates, picked without the PRM.

A gain of best-of-N over greedy mixes two causes: sampling ``n`` candidates at a temperature, and
the PRM's choice among them. These pickers (:class:`~rlplugs.builtins.prm.guidance.CandidateRanker`
objects, played by the same :class:`~rlplugs.builtins.prm.guidance.BestOfN` search) separate them:

- :class:`RandomPick` plays one of the ``n`` samples uniformly at random. Since the samples are
  drawn independently, that is the same as playing one sample at the guidance's temperature: what
  best-of-N scores with no skill in choosing. PRM best-of-N must beat it for the PRM to count.
- :class:`OutcomePick` applies each distinct candidate to a clone of the game, lets the policy
  play that clone to its end once, and plays the candidate whose clone had the best *outcome*
  (the weighted reward components, as the PRM's labels use; an unscored clone ranks last). It
  reads the game's true result at test time: a lookahead in the real game, with its hidden state
  (the secret word, the target grid) inside, which a deployed agent does not have, at the cost of
  a whole rollout per candidate and turn. It is an **upper bound** for a one-rollout selector,
  not a fair competitor of the PRM.

Both only touch the :class:`~rlplugs.episode.Episode` protocol, so they work for every
multi-turn environment.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rlplugs import BatchPolicy, Episode, guard, play_lockstep
from rlplugs.builtins.prm.labels import outcome_value


@dataclass
class RandomPick:
    """A uniformly random value per sample, so the played one is a uniform draw among the ``n``
    (duplicates kept: a reply sampled twice is twice as likely, as when sampling once)."""

    seed: int = 0
    name: str = field(default="random", init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def rank(self, states: Sequence[Episode], candidates: Sequence[Sequence[str]], policy: BatchPolicy) -> list[list[float]]:
        return [[self._rng.random() for _ in texts] for texts in candidates]


@dataclass
class OutcomePick:
    """The outcome of one rollout to the end after each distinct candidate (an upper bound: it
    reads the true result at test time). All rollouts of a round advance together."""

    weights: Mapping[str, float]
    max_turns: int = 1000
    name: str = field(default="outcome-rollout", init=False)

    def rank(self, states: Sequence[Episode], candidates: Sequence[Sequence[str]], policy: BatchPolicy) -> list[list[float]]:
        pairs = [(i, text) for i, texts in enumerate(candidates) for text in dict.fromkeys(texts)]
        clones = []
        for i, text in pairs:
            clone = guard(states[i].clone())  # an error stops this rollout (unscored), not the search
            clone.step(text)
            clones.append(clone)
        play_lockstep(clones, policy, self.max_turns)
        values = {pair: outcome_value(clone, self.weights) for pair, clone in zip(pairs, clones, strict=True)}
        return [[-1.0 if values[(i, t)] is None else values[(i, t)] for t in texts] for i, texts in enumerate(candidates)]
