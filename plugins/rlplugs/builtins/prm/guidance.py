"""Inference-time search with a PRM: best-of-N and beam search over any multi-turn episode.

Both strategies only touch the :class:`~rlplugs.episode.Episode` protocol (``observation``,
``step``, ``clone``, ``current_seat``, ``trained_seats``), so they work for every multi-turn
environment. Turns of seats that are not trained (a programmatic partner's, or in self-play none)
are played by the policy as usual; at each *learner* turn:

- **best-of-N** proposes ``n`` candidates in one batched call, the PRM scores each in its context,
  and the highest-scoring candidate is played (the same search with another picker, a
  :class:`CandidateRanker`, gives its controls: :mod:`rlplugs.builtins.prm.controls`);
- **beam search** keeps ``beam_width`` cloned games; for ``iterations`` learner turns each beam
  is expanded with ``n`` candidates, every (beam, candidate) pair is scored in one PRM batch, and
  the ``beam_width`` best become the new beams (a beam that already finished competes with its
  last score). The best beam is then finished without search.

The PRM score is an estimate of the chance to win from that point, so beams are ranked by their
latest score, never by the game's true result (that would be an oracle, not a search).

Candidates are sampled at the guidance's ``temperature`` (and within its nucleus ``top_p``, when
set) from a shallow copy of the policy (same weights); every other turn uses the policy as given (greedy in the benchmark). With
``policy_reply`` the first candidate is the policy's own reply and only ``n - 1`` are sampled
(:class:`Proposer`): a search can then always fall back on the greedy turn, whose format a small
SFT policy keeps more often than its samples do (measured: benchmarks/README.md, PRM guidance
with its controls). The played episode comes back wrapped in :class:`GuidedEpisode`, whose ``record()`` adds the trace: every candidate,
its PRM score and which one was played. Games are played guarded (:func:`rlplugs.episode.guard`):
an environment error stops that game (its sample is then unscored), not the search of the others.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rlplugs import BatchPolicy, Episode, Message, advance_until_learner, guard, play_lockstep

log = logging.getLogger(__name__)


class TurnScorer(Protocol):
    """Scores candidate turns in their contexts (higher = more likely to win); a trained
    :class:`~rlplugs.builtins.prm.model.PRMScorer` is one."""

    def score(self, contexts: Sequence[Sequence[Message]], candidates: Sequence[str]) -> list[float]: ...


@runtime_checkable
class CandidateRanker(Protocol):
    """Values for the candidates of several learner turns at once, read from the games themselves
    (``states``: each game before its turn) rather than from the messages alone, with the policy
    that plays the rest; best-of-N plays the highest. The PRM-free controls are rankers."""

    name: str

    def rank(self, states: Sequence[Episode], candidates: Sequence[Sequence[str]], policy: BatchPolicy) -> list[list[float]]: ...


class GuidedEpisode:
    """A played episode with the guidance trace; behaves as the episode itself (every attribute
    is the wrapped episode's), and its ``record()`` carries the trace under ``"guidance"``."""

    def __init__(self, episode: Episode, trace: dict[str, Any]):
        self.episode = episode
        self.trace = trace

    def __getattr__(self, name: str) -> Any:
        return getattr(self.episode, name)

    def clone(self) -> GuidedEpisode:
        return GuidedEpisode(self.episode.clone(), copy.deepcopy(self.trace))

    def record(self) -> dict[str, Any]:
        return {**self.episode.record(), "guidance": self.trace}


def sampler(policy: BatchPolicy, temperature: float | None, top_p: float | None = None) -> BatchPolicy:
    """The policy that proposes candidates: ``policy`` itself (both None) or a shallow copy with
    the same weights sampling at ``temperature`` and/or within the nucleus ``top_p``."""
    settings = {name: value for name, value in (("temperature", temperature), ("top_p", top_p)) if value is not None}
    for name, value in settings.items():
        if not hasattr(policy, name):
            raise TypeError(
                f"{type(policy).__name__} has no {name!r} to sample candidates with {value}; "
                f"pass {name}=None to use the policy's own sampling"
            )
    if not settings:
        return policy
    view = copy.copy(policy)
    for name, value in settings.items():
        setattr(view, name, value)
    return view


@dataclass
class Proposer:
    """Proposes a learner turn's ``n`` candidates for many contexts at once: all sampled at
    ``temperature`` and ``top_p`` (see :func:`sampler`), or with ``policy_reply`` the policy's own
    reply first and ``n - 1`` samples after it (two batched calls: one model call cannot mix the
    two settings)."""

    policy: BatchPolicy
    n: int
    temperature: float | None
    policy_reply: bool = False
    top_p: float | None = None

    def __post_init__(self) -> None:
        self._sampler = sampler(self.policy, self.temperature, self.top_p)

    def __call__(self, contexts: list[list[Message]]) -> list[list[str]]:
        if not self.policy_reply:
            return self._sampler.generate(contexts, n=self.n)
        own = self.policy.generate(contexts, n=1)
        if self.n == 1:
            return own
        samples = self._sampler.generate(contexts, n=self.n - 1)
        return [mine + sampled for mine, sampled in zip(own, samples, strict=True)]


def _score_unique(scorer: TurnScorer, contexts: list[list[Message]], candidates: list[list[str]]) -> list[list[float]]:
    """Score every candidate of every context in one PRM batch; duplicates are scored once."""
    pairs = [(i, text) for i, texts in enumerate(candidates) for text in dict.fromkeys(texts)]
    values = scorer.score([contexts[i] for i, _ in pairs], [text for _, text in pairs])
    lookup = {pair: v for pair, v in zip(pairs, values, strict=True)}
    return [[lookup[(i, text)] for text in texts] for i, texts in enumerate(candidates)]


@dataclass
class BestOfN:
    """At every learner turn play the best of ``n`` sampled candidates according to ``scorer``: a
    PRM (a :class:`TurnScorer`) or a :class:`CandidateRanker` (the controls).

    ``margin`` keeps the first candidate (with ``policy_reply`` the policy's own reply) unless another
    scores more than ``margin`` above it: the outcome bound over such candidates left the greedy reply on
    under 1% of turns, a PRM's plain argmax on one in nine (benchmarks/README.md, session 42), so
    a switch should need a clear lead, not a PRM's noise."""

    scorer: TurnScorer | CandidateRanker
    n: int = 4
    temperature: float | None = 0.7
    policy_reply: bool = False
    top_p: float | None = None
    margin: float = 0.0
    max_turns: int = 1000
    name: str = field(default="best-of-n", init=False)

    def _pick(self, values: list[float]) -> int:
        """The highest score's candidate (the first of equals), unless it leads the first by ``margin`` or less."""
        best = max(range(len(values)), key=values.__getitem__)
        return 0 if values[best] - values[0] <= self.margin else best

    def play(self, episode: Episode, policy: BatchPolicy) -> GuidedEpisode:
        return self.play_all([episode], policy)[0]

    def play_all(self, episodes: Sequence[Episode], policy: BatchPolicy) -> list[GuidedEpisode]:
        """Play several episodes at once: one candidate call (two with ``policy_reply``) and one PRM
        batch per round. An error in one episode's ``step`` stops that episode alone (played
        guarded)."""
        episodes = [guard(ep) for ep in episodes]
        propose = Proposer(policy, self.n, self.temperature, self.policy_reply, self.top_p)
        traces: list[list[dict[str, Any]]] = [[] for _ in episodes]
        for _ in range(self.max_turns):
            advance_until_learner(episodes, policy, self.max_turns)
            movers = [i for i, ep in enumerate(episodes) if not ep.done]
            if not movers:
                break
            contexts = [episodes[i].observation() for i in movers]
            candidates = propose(contexts)
            if isinstance(self.scorer, CandidateRanker):
                scores = self.scorer.rank([episodes[i] for i in movers], candidates, policy)
            else:
                scores = _score_unique(self.scorer, contexts, candidates)
            for i, texts, values in zip(movers, candidates, scores, strict=True):
                best = self._pick(values)
                traces[i].append({"turn": len(traces[i]), "seat": episodes[i].current_seat,
                                  "candidates": texts, "scores": values, "chosen": best})  # fmt: skip
                episodes[i].step(texts[best])
        else:
            raise RuntimeError(f"episode did not end within {self.max_turns} turns")
        pick = self.scorer.name if isinstance(self.scorer, CandidateRanker) else "prm"
        head = {"strategy": self.name, "pick": pick, "n": self.n, "temperature": self.temperature, "top_p": self.top_p,
                "policy_reply": self.policy_reply, "margin": self.margin}  # fmt: skip
        return [GuidedEpisode(ep, {**head, "turns": t}) for ep, t in zip(episodes, traces, strict=True)]


@dataclass
class _Beam:
    episode: Episode
    score: float | None
    path: list[dict[str, Any]]


@dataclass
class BeamSearch:
    """Beam search over learner turns in cloned episodes, ranked by ``scorer``, then finished."""

    scorer: TurnScorer
    beam_width: int = 2
    n: int = 4
    iterations: int = 3
    temperature: float | None = 0.7
    policy_reply: bool = False
    top_p: float | None = None
    max_turns: int = 1000
    name: str = field(default="beam", init=False)

    def play(self, episode: Episode, policy: BatchPolicy) -> GuidedEpisode:
        return self.play_all([episode], policy)[0]

    def play_all(self, episodes: Sequence[Episode], policy: BatchPolicy) -> list[GuidedEpisode]:
        """Search several episodes at once: the live beams of all of them share one candidate call
        and one PRM batch per iteration, and the best beams are finished together."""
        propose = Proposer(policy, self.n, self.temperature, self.policy_reply, self.top_p)
        searches = [[_Beam(guard(ep.clone()), None, [])] for ep in episodes]  # an error stops one beam
        expansions: list[list[dict[str, Any]]] = [[] for _ in episodes]
        for iteration in range(self.iterations):
            advance_until_learner([b.episode for beams in searches for b in beams], policy, self.max_turns)
            live = [(i, b) for i, beams in enumerate(searches) for b in beams if not b.episode.done]
            if not live:
                break
            contexts = [b.episode.observation() for _, b in live]
            candidates = propose(contexts)
            scores = _score_unique(self.scorer, contexts, candidates)
            pools: list[list[tuple[float | None, _Beam, str | None]]] = [
                [(b.score, b, None) for b in beams if b.episode.done] for beams in searches
            ]
            for (i, beam), texts, values in zip(live, candidates, scores, strict=True):
                pools[i] += [(v, beam, text) for text, v in dict(zip(texts, values)).items()]
            for i, pool in enumerate(pools):
                if not any(text is not None for _, _, text in pool):
                    continue  # every beam of this episode is over
                pool.sort(key=lambda item: -1.0 if item[0] is None else item[0], reverse=True)
                searches[i] = [self._child(parent, text, value) for value, parent, text in pool[: self.beam_width]]
                expansions[i].append({"iteration": iteration, "scored": len(pool), "kept": [b.score for b in searches[i]]})
        best = [max(beams, key=lambda b: -1.0 if b.score is None else b.score) for beams in searches]
        play_lockstep([b.episode for b in best], policy, self.max_turns)
        head = {"strategy": self.name, "n": self.n, "beam_width": self.beam_width, "iterations": self.iterations,
                "temperature": self.temperature, "top_p": self.top_p, "policy_reply": self.policy_reply}  # fmt: skip
        return [GuidedEpisode(b.episode, {**head, "turns": b.path, "expansions": e}) for b, e in zip(best, expansions, strict=True)]

    @staticmethod
    def _child(parent: _Beam, text: str | None, value: float | None) -> _Beam:
        """A finished beam carries over; otherwise a clone of ``parent`` that played ``text``."""
        if text is None:
            return parent
        episode = parent.episode.clone()
        seat = episode.current_seat
        episode.step(text)
        step = {"turn": len(parent.path), "seat": seat, "candidate": text, "score": value}
        return _Beam(episode, value, [*parent.path, step])
