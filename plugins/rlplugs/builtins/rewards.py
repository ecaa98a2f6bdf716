"""Generic reward components any environment can add: ``--extra_rewards length-penalty:0.1 think-format``.

They are registered through the same hook as a third party's (entry point ``reward-components``),
score only the completion text, and are deliberately small: an environment's own components say
whether the task was solved; these shape *how* the answer is written.
"""

from __future__ import annotations

from pydantic import Field

import rlplugs
from rlplugs import Registration, RewardComponent, Sample, StrictConfig


class LengthPenaltyConfig(StrictConfig):
    limit_chars: int = Field(4000, gt=0, description="completions up to this many characters are not penalised")


def length_penalty(config: LengthPenaltyConfig) -> RewardComponent:
    """0 up to ``limit_chars``, then falling linearly to -1 at twice the limit (and staying there):
    a soft brake on rambling that leaves answers of normal length alone."""

    def score(sample: Sample) -> float:
        over = max(0, len(sample.completion) - config.limit_chars)
        return -min(1.0, over / config.limit_chars)

    return RewardComponent("length-penalty", score, description=length_penalty.__doc__ or "")


class ThinkFormatConfig(StrictConfig):
    require_answer: bool = Field(True, description="also require non-empty text after the reasoning block")


def think_format(config: ThinkFormatConfig) -> RewardComponent:
    """1 when the completion is one reasoning block closed by ``</think>`` (the opening ``<think>``
    may come from the chat template's generation prompt) followed by an answer; else 0."""

    def score(sample: Sample) -> float:
        text = sample.completion.strip()
        if text.startswith("<think>"):
            text = text[len("<think>") :]
        reasoning, closed, answer = text.partition("</think>")
        if not closed or "<think>" in reasoning or "<think>" in answer or "</think>" in answer:
            return 0.0
        return float(bool(answer.strip()) or not config.require_answer)

    return RewardComponent("think-format", score, description=think_format.__doc__ or "")


@rlplugs.hookimpl
def rlplugs_register_reward_components() -> list[Registration]:
    return [
        Registration("length-penalty", length_penalty, "penalise completions longer than a limit", LengthPenaltyConfig),
        Registration(
            "think-format", think_format, "reward one closed <think> block followed by an answer", ThinkFormatConfig
        ),
    ]
