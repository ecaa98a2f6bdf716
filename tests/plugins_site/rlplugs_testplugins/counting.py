"""``count-test``: a multi-turn environment implementing the Episode protocol.

The environment asks for a number each turn, three turns (``turns``; ``turns_by_start`` sets
other lengths for some rows, as in environments whose episodes end at different rounds); ``digits`` = share of turns whose
reply contains a digit, ``final_len`` = 1 if the last reply is under 40 characters. Cheap and
deterministic, so adapters (TRL rollouts, verifiers Env, guidance) can be tested on it.

``fail_starts`` makes the episodes of those rows (by ``start``) raise in ``step`` on their second
turn, as an environment whose judge crashes would. Such an episode scores its replies so far
when asked, as an environment that cannot tell an interrupted episode from a finished one would
(matrl's "no submission" zeros): the adapters must not ask. ``broken_starts`` makes starting the
episodes of those rows raise, as an environment that cannot build a row's scene would.
"""

from __future__ import annotations

import copy
from typing import Any

from datasets import Dataset

import rlplugs
from rlplugs import EnvSpec, EvalProtocol, Registration, RewardComponent, Sample, Score, StepResult, StrictConfig, play


class CountConfig(StrictConfig):
    rows: int = 8
    turns: int = 3
    turns_by_start: dict[int, int] = {}
    fail_starts: list[int] = []
    broken_starts: list[int] = []


class CountEpisode:
    """Three turns of 'say a number'; one seat, ``agent``."""

    trained_seats = ("agent",)

    def __init__(self, start: int, turns: int, faulty: bool = False):
        self.turns = turns
        self.faulty = faulty
        self.replies: list[str] = []
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You count."},
            {"role": "user", "content": f"Say a number after {start}."},
        ]

    @property
    def done(self) -> bool:
        return len(self.replies) >= self.turns

    @property
    def current_seat(self) -> str:
        return "agent"

    def observation(self) -> list[dict[str, Any]]:
        return list(self.messages)

    def step(self, text: str) -> StepResult:
        if self.done:
            raise RuntimeError("episode is over")
        if self.faulty and len(self.replies) == 1:
            raise RuntimeError("judge crashed (simulated fault)")
        self.replies.append(text)
        self.messages.append({"role": "assistant", "content": text})
        if not self.done:
            self.messages.append({"role": "user", "content": "Next number?"})
        return StepResult(done=self.done)

    def scores(self) -> dict[str, Score]:
        if not self.done and not self.faulty:
            return {"digits": Score(None, "episode not finished"), "final_len": Score(None, "episode not finished")}
        digits = sum(any(c.isdigit() for c in r) for r in self.replies) / len(self.replies)
        return {"digits": Score(digits), "final_len": Score(float(len(self.replies[-1]) < 40))}

    def transcript(self, seat: str) -> list[dict[str, Any]]:
        return list(self.messages)

    def clone(self) -> CountEpisode:
        return copy.deepcopy(self)

    def record(self) -> dict[str, Any]:
        return {"messages": self.messages, "scores": {k: v.value for k, v in self.scores().items()}}


def _from_episode(name: str):
    def component(sample: Sample) -> Score:
        return sample.episode.scores()[name]

    return component


def build(config: CountConfig) -> EnvSpec:
    def episodes(row: dict[str, Any]) -> CountEpisode:
        if int(row["start"]) in config.broken_starts:
            raise ValueError(f"no episode for start {row['start']} (simulated fault)")
        start = int(row["start"])
        return CountEpisode(start, config.turns_by_start.get(start, config.turns), start in config.fail_starts)

    def rows(n: int, offset: int) -> Dataset:
        out = []
        for i in range(n):
            ep = CountEpisode(i + offset, config.turns)
            out.append({"prompt": ep.observation(), "start": i + offset, "seat": "agent"})
        return Dataset.from_list(out)

    def preflight_samples() -> list[Sample]:
        ep = play(CountEpisode(1, config.turns), lambda m: "2")
        return [Sample(prompt=ep.transcript("agent")[:2], completion="2", episode=ep)]

    return EnvSpec(
        description="Say a number each turn (multi-turn test environment).",
        datasets={"train": lambda: rows(config.rows, 0), "validation": lambda: rows(4, 100)},
        components=[RewardComponent("digits", _from_episode("digits"), 1.0), RewardComponent("final_len", _from_episode("final_len"), 0.2)],
        preflight_samples=preflight_samples,
        episodes=episodes,
        eval=EvalProtocol(splits=("validation",), rows=4, samples_per_row=2, max_new_tokens=16, success_component="digits"),
        reference_policy=lambda messages: "7",
    )


@rlplugs.hookimpl
def rlplugs_register_environments():
    return [Registration("count-test", build, "say-a-number multi-turn episodes (test)", CountConfig)]
