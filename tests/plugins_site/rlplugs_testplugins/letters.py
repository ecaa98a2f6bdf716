"""``letters-test``: a single-turn environment whose reward varies on a random model's output.

``letters`` = fraction of ASCII letters in the completion (a random tiny model's garbage text
gives different values per sample, so GRPO groups have spread); ``brevity`` = 1 for an empty
completion falling linearly to 0 at 200 characters. With ``dead_component=True`` a third
component that can never compute is added, for preflight tests; ``recommend`` adds trainer
recommendations (a misnamed one must stop the launch). ``task`` is named like a verifiers
taskset key (a taskset config calls it ``env_task``) and has its own validator.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset
from pydantic import field_validator

import rlplugs
from rlplugs import EnvSpec, EvalProtocol, Registration, RewardComponent, Sample, StrictConfig, Unscorable

PROMPTS = ["Write a word.", "Name a colour.", "Say hello.", "Spell a fruit.", "Write a letter.", "Name an animal."]


class LettersConfig(StrictConfig):
    rows: int = 8
    dead_component: bool = False
    recommend: dict[str, Any] = {}
    task: str = "spell"

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        if value not in ("spell", "name"):
            raise ValueError(f"unknown task {value!r}; tasks: spell, name")
        return value


def letters(sample: Sample) -> float:
    text = sample.completion
    return sum(c.isascii() and c.isalpha() for c in text) / len(text) if text else 0.0


def brevity(sample: Sample) -> float:
    return max(0.0, 1.0 - len(sample.completion) / 200)


def never(sample: Sample) -> float:
    raise Unscorable("judge 'never' is switched off")


def _rows(n: int, offset: int) -> Dataset:
    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": PROMPTS[(i + offset) % len(PROMPTS)]}], "row_id": i + offset} for i in range(n)]
    )


def build(config: LettersConfig) -> EnvSpec:
    components = [RewardComponent("letters", letters, 1.0), RewardComponent("brevity", brevity, 0.5)]
    if config.dead_component:
        components.append(RewardComponent("never", never, 1.0))
    return EnvSpec(
        description="Reward ASCII letters and brevity (test environment).",
        datasets={"train": lambda: _rows(config.rows, 0), "validation": lambda: _rows(4, 100)},
        components=components,
        preflight_samples=lambda: [Sample(prompt=PROMPTS[0], completion="hello"), Sample(prompt=PROMPTS[1], completion="12 ab")],
        eval=EvalProtocol(splits=("validation",), rows=4, samples_per_row=2, max_new_tokens=16, success_component="letters"),
        trainer_defaults={"chat_template_kwargs": {"enable_thinking": False}, **config.recommend},
        reference_policy=lambda messages: "abc",
    )


@rlplugs.hookimpl
def rlplugs_register_environments():
    return [Registration("letters-test", build, "letters and brevity rewards (test)", LettersConfig)]
